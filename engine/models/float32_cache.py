"""Greedy decoding of a 16-bit model on a CPU with its key/value cache, and the attention of
each new token, in float32.

Why: torch's CPU attention kernel is slow for one bfloat16 query over a long cache, so a long
prompt's answer decoded slower in bfloat16 than in float32 (docs/design/model-precision.md).
Kept in float32, the cache holds the same values (a bfloat16 number is exactly a float32 one)
and a token attends over it in float32.
The prompt's own forward pass is unchanged: it attends in the model's precision. The scores
differ from the bfloat16 kernel's in their last digits, as any two bfloat16 kernels' do.

``TransformersLM.decoding_cache`` uses it for prompts that need no padding (one prompt, or a
batch of prompts of one length): a padded batch attends through masks, where bfloat16 is not
slower, and short padded batches decoded up to 5 % slower with it.

The cache is also preallocated, written in place, instead of growing by concatenation (a copy
of the whole cache per token); an operation that replaces the cache's tensors (cropping, beam
reordering) is followed by one reallocation.

Imported only where a local model runs (it imports torch and transformers).
"""
from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

#: the attention implementation name a model runs under once :func:`enable` switched it on
ATTENTION = "kgqa_float32_decode"
#: slots allocated when a cache outgrows its capacity, at least
_GROWTH = 256
#: transformers' own SDPA attention, which :func:`_attention` runs in float32 or as is
_SDPA = AttentionInterface()["sdpa"]


def enable(model: Any, device: str) -> bool:
    """Switch ``model`` to the float32 decoding attention when it pays: a bfloat16 or float16
    model on a CPU that attends through SDPA. Whether it did; a model it did not switch decodes
    as transformers does."""
    if device != "cpu" or model.dtype not in (torch.bfloat16, torch.float16):
        return False
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(ATTENTION, _attention)
    # masks as SDPA's: transformers builds none at all for an implementation without one
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    model.set_attn_implementation(ATTENTION)
    return True


def new_cache(model: Any, capacity: int) -> Any:
    """An empty cache for one :meth:`generate` call over prompts of at most ``capacity`` tokens
    with their new ones (it grows past that when it must)."""
    cache = DynamicCache()
    cache.layers = [Float32Layer(capacity) for _ in range(model.config.get_text_config().num_hidden_layers)]
    return cache


def _attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> tuple[Any, Any]:
    """SDPA, in float32 when the cache handed float32 keys and values to a 16-bit query."""
    if key.dtype == query.dtype:
        return _SDPA(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.to(key.dtype)
    out, weights = _SDPA(module, query.to(key.dtype), key, value, attention_mask, **kwargs)
    return out.to(query.dtype), weights


class Float32Layer(DynamicLayer):
    """One layer's keys and values in float32 buffers of ``capacity`` positions. The first
    update (the prompt) returns its own states, so the prompt attends in the model's precision;
    later ones return float32 views of the buffers."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._buffers: tuple[Any, Any] | None = None
        self._view: Any = None  # the keys tensor this layer last handed out

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held, new = self.get_seq_length(), key_states.shape[-2]
        buffers = self._buffers
        if (
            buffers is None
            or self.keys is not self._view  # cropped or reordered since: the buffers are stale
            or buffers[0].shape[-2] < held + new
            or buffers[0].shape[0] != key_states.shape[0]
        ):
            size = max(self.capacity, held + new + _GROWTH) if buffers is not None else max(self.capacity, held + new)
            shape = (*key_states.shape[:2], size, key_states.shape[-1])
            buffers = tuple(torch.empty(shape, dtype=torch.float32, device=key_states.device) for _ in range(2))
            if held:
                buffers[0][..., :held, :] = self.keys
                buffers[1][..., :held, :] = self.values
            self._buffers = buffers  # type: ignore[assignment]
        buffers[0][..., held:held + new, :] = key_states
        buffers[1][..., held:held + new, :] = value_states
        self.keys, self.values = buffers[0][..., :held + new, :], buffers[1][..., :held + new, :]
        self._view = self.keys
        if held == 0:
            return key_states, value_states
        return self.keys, self.values
