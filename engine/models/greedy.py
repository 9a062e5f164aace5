"""Greedy decoding of a batch of prompts, each row decoded as ``generate`` decodes it, with two
savings that transformers' ``generate`` does not make:

- **The prompts' common prefix is read once.** A method's prompts start alike (the chat
  template's preamble, the method's instructions: 104 of EtD's ≈ 270 prompt tokens, 207 of
  FiDeLiS's ≈ 230-token plan prompts, 80 of its ≈ 104-token verifications); its keys and values
  are computed for one row and shared by every row. Each row's own tokens keep their positions (``[prefix][padding][own tokens]``,
  the padding masked), so a row attends to what it would attend to alone.
- **A row that has ended leaves the batch.** ``generate`` goes on computing a finished row
  (end-of-sequence, or its stop rule) until the last row ends; a decoding step costs about a
  fixed part plus a part per row, so a batch whose rows mostly end early while one runs on to the
  token cap paid for every row at every step.

Imported only where a local model runs (it imports torch and transformers).
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import DynamicCache

from engine import deadlines

#: share a common prefix only from this many tokens on (a shorter one saves less than the
#: extra forward pass costs)
MIN_SHARED = 16

#: generation settings that make ``generate`` change the scores before its argmax; a model
#: whose generation config sets one of them is decoded by ``generate`` instead
_SCORE_SETTINGS = (
    "repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens",
    "forced_bos_token_id", "forced_eos_token_id", "sequence_bias", "min_new_tokens", "exponential_decay_length_penalty",
    "encoder_repetition_penalty", "renormalize_logits", "watermarking_config",
)
_NEUTRAL = {"repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "renormalize_logits": False, "min_new_tokens": 0}


def plain_argmax(model: Any) -> bool:
    """Whether ``generate``'s greedy step for ``model`` is the argmax of its scores as they come
    (no repetition penalty, suppressed tokens or the like in its generation config), which is
    what :func:`decode` does."""
    config = model.generation_config
    for name in _SCORE_SETTINGS:
        value = getattr(config, name, None)
        if value is not None and value != _NEUTRAL.get(name) and value != []:
            return False
    return not (getattr(config, "min_length", 0) or 0) > 0


@functools.cache
def _cache_keyword(model_class: type) -> str:
    """The name a model's forward pass takes its key/value cache under: ``cache`` in the
    transformers 5 releases that renamed it (``past_key_values`` is deprecated there, to go in
    5.40), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def caching(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword arguments that run ``model``'s forward pass over ``cache`` and extend it."""
    return {_cache_keyword(type(model)): cache, "use_cache": True}


def returned_cache(output: Any) -> Any:
    """The key/value cache a forward pass run with :func:`caching` returned."""
    return output["cache"] if "cache" in output else output["past_key_values"]


def shared_prefix(encoded: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own; 0 below
    :data:`MIN_SHARED` or for a single prompt."""
    if len(encoded) < 2:
        return 0
    limit = min(len(e) for e in encoded) - 1
    first = encoded[0]
    n = 0
    while n < limit and all(e[n] == first[n] for e in encoded):
        n += 1
    return n if n >= MIN_SHARED else 0


def decode(
    model: Any,
    encoded: Sequence[list[int]],
    *,
    max_new_tokens: int,
    eos: int,
    pad: int,
    ended: Callable[[int, list[int]], bool],
    cache: Any = None,
    share: bool = True,
) -> list[list[int]]:
    """The new tokens of each prompt in ``encoded``, greedily: a row ends with the end-of-sequence
    token (kept), when ``ended(row, tokens)`` holds for its tokens so far (the last kept), or at
    ``max_new_tokens``. ``cache``: the key/value cache to fill (default transformers' own);
    ``share``: read a common prefix once (:func:`shared_prefix`)."""
    device = model.device
    cache = DynamicCache() if cache is None else cache
    over_cache = caching(model, cache)
    n = len(encoded)
    shared = shared_prefix(encoded) if share else 0
    if shared:
        prefix = torch.tensor([encoded[0][:shared]], device=device)
        model(input_ids=prefix, attention_mask=torch.ones_like(prefix), logits_to_keep=1, **over_cache)
        cache.batch_repeat_interleave(n)
    own = [e[shared:] for e in encoded]
    width = max(len(o) for o in own)
    ids = torch.tensor([[pad] * (width - len(o)) + o for o in own], device=device)
    mask = torch.tensor([[1] * shared + [0] * (width - len(o)) + [1] * len(o) for o in own], device=device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)[:, shared:]
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1, **over_cache).logits
    following = logits[:, -1].argmax(-1)
    position = positions[:, -1]
    rows = list(range(n))  # the prompts still decoding, in batch order
    out: list[list[int]] = [[] for _ in range(n)]
    for step in range(max_new_tokens):
        deadlines.check()  # a step costs one forward pass: the finest place to stop at a deadline
        going = []
        for at, (row, token) in enumerate(zip(rows, following.tolist())):
            out[row].append(token)
            if token != eos and not ended(row, out[row]):
                going.append(at)
        if not going or step == max_new_tokens - 1:
            break
        if len(going) < len(rows):
            keep = torch.tensor(going, device=device)
            cache.batch_select_indices(keep)
            mask, following, position = mask[keep], following[keep], position[keep]
            rows = [rows[at] for at in going]
        mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1)
        position = position + 1
        logits = model(input_ids=following[:, None], attention_mask=mask, position_ids=position[:, None], **over_cache).logits
        following = logits[:, -1].argmax(-1)
    return out
