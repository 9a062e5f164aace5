"""A local causal language model through transformers (:class:`TransformersLM`), the
:class:`engine.models.lm.LanguageModel` that every method can decode with under constraints. It
loads a directory, a ``.gguf`` file or a hub id from the local cache (never downloading) in the
precision asked for, on the device :func:`engine.models.device.pick_device` chose; wraps prompts in
their template (:mod:`engine.models.templates`); decodes greedily, in length-sorted batches
(:mod:`engine.models.greedy`) or by beam search, with per-prompt token constraints (rules, or the
allowed tokens of each step handed in by the caller between steps) and text stop rules (the
transformers logits processor :class:`_Allowed` and stopping criterion :class:`_TextStop`); and scores continuations in batched passes over a cached prompt.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine import deadlines
from engine.errors import InvalidInputError, KGQAError
from engine.models.device import pick_device
from engine.models.lm import (
    AllowedTokens,
    BatchStop,
    Decoding,
    Generation,
    LanguageModel,
    StepRows,
    StopWhen,
    TokenCount,
    TokenLogprob,
    per_prompt_stops,
)
from engine.models.sources import model_source
from engine.models.run_folder import unfinished
from engine.models.templates import TEMPLATES, check_template, saved_template
from engine.outputs import STAGING_DIR

#: the offline default's name (:func:`engine.models.loading.local_source` finds its file)
DEFAULT_LM = "SmolLM2-135M-Instruct"
#: weight precisions a local model loads in ("auto": the checkpoint's own)
DTYPES = ("float32", "bfloat16", "float16", "auto")
#: how to get a language model, for a ``--model`` that names none
LM_SOURCES = (
    "train one first (`kgqa lm train … --out PATH`, or the method's own `train` command: see its README), "
    f"or name an existing directory or .gguf file, a hub id (org/name), or leave --model out for the offline {DEFAULT_LM}"
)


def check_dtype(dtype: str | None) -> None:
    """Refuse a ``dtype`` that is not one of :data:`DTYPES` (None: the loader's default)."""
    if dtype is not None and dtype not in DTYPES:
        raise InvalidInputError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")


class TransformersLM(LanguageModel):
    """A local causal LM through transformers, on the device :func:`pick_device` chose."""

    def __init__(self, model: Any, tokenizer: Any, name: str, device: str, template: str | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = device
        if template is None:
            template = "chat" if getattr(tokenizer, "chat_template", None) else "raw"
        self.template = check_template(template)
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_id
        self._prefixes: list[tuple[list[int], Any]] = []  # score_batch's recent prompt caches, most recent first
        self.tokens = TokenCount()

    @classmethod
    def load(
        cls, name_or_path: str, device: str | None = None, template: str | None = None, dtype: str | None = None
    ) -> TransformersLM:
        """``dtype``: the weights' precision, one of :data:`DTYPES`; None: float32 on a CPU (the
        precision the engine's models were chosen in) and the checkpoint's own elsewhere.
        ``bfloat16`` on a CPU with bf16 instructions cuts model time ≈ 2.5× and may change a
        close decision (docs/design/model-precision.md)."""
        check_dtype(dtype)
        found = model_source(name_or_path, "language model", LM_SOURCES)  # before torch loads: a bad name fails at once
        if unfinished(found.path):  # its model files may be missing, or half written
            run = Path(name_or_path).parent if Path(found.path).name == STAGING_DIR else name_or_path
            raise InvalidInputError(
                f"language model {name_or_path!r} is a fine-tuning run that has not finished (stopped in training, or "
                f"while it saved its model): finish it with `kgqa lm train … --resume {run}`, or name a finished model"
            )
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from engine.models import float32_cache, gguf_conversion

        device = pick_device(device)
        if template is None:
            template = saved_template(found.path)
        if dtype is None:
            dtype = "float32" if device == "cpu" else "auto"
        try:
            if found.path.endswith(".gguf"):  # read in float32, cast below
                tokenizer, model = gguf_conversion.read_gguf(Path(found.path))
            else:
                tokenizer = AutoTokenizer.from_pretrained(found.path, **found.options)
                model = AutoModelForCausalLM.from_pretrained(
                    found.path, dtype=dtype if dtype == "auto" else getattr(torch, dtype), **found.options
                )
        except (OSError, ValueError) as e:
            raise KGQAError(f"cannot load the language model {name_or_path!r}: {e}") from e
        model.to(device)
        if dtype != "auto":
            model.to(getattr(torch, dtype))
        model.eval()
        lm = cls(model, tokenizer, name_or_path, device, template)
        lm.float32_decoding = float32_cache.enable(model, device)
        return lm

    #: greedy decoding keeps the key/value cache in float32 (a 16-bit model on a CPU: :func:`float32_cache.enable`)
    float32_decoding: bool = False

    def decoding_cache(self, padded: bool, prompt_tokens: int, new_tokens: int) -> Any | None:
        """The key/value cache to decode prompts of ``prompt_tokens`` (``padded`` to that
        width or not) and ``new_tokens`` more: the float32 cache where :attr:`float32_decoding`
        holds and the prompts need no padding, else none (transformers' own). It pays only
        there: without padding bfloat16 attends through a kernel that is slow for one query; with
        padding both attend through masks at the same cost, and short padded batches decoded a
        little slower with it (docs/design/model-precision.md)."""
        if not self.float32_decoding or padded:
            return None
        from engine.models import float32_cache

        return float32_cache.new_cache(self.model, prompt_tokens + new_tokens)

    # -- prompts and tokens
    @property
    def context_tokens(self) -> int | None:
        """The most tokens the model reads: the positions it was built with (None: unbounded)."""
        return getattr(self.model.config, "max_position_embeddings", None)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The token ids the model sees for ``prompt``, template applied. A prompt longer than
        the model's :attr:`context_tokens` is refused: past them the model reads noise, and
        attention over it costs quadratic time and memory (a long question must not stall a
        server or exhaust its memory)."""
        ids = self.template_ids(prompt)
        limit = self.context_tokens
        if limit is not None and len(ids) > limit:
            raise InvalidInputError(
                f"a prompt of {len(ids):,} tokens is longer than the {limit:,} that {self.name} reads: shorten the "
                "question (the prompt holds it), or give the method fewer paths or examples"
            )
        return ids

    def template_ids(self, prompt: str) -> list[int]:
        """The token ids of ``prompt`` with the template applied, however many (:meth:`prompt_ids`
        refuses a prompt longer than the model reads; fine-tuning skips one)."""
        if self.template == "chat":
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return self.tokenizer(text, add_special_tokens=False).input_ids
        text = prompt if self.template == "raw" else TEMPLATES.get(self.template, self.template).format(prompt=prompt)
        return self.tokenizer(text).input_ids

    @functools.cached_property
    def longest_token(self) -> int:
        """The most characters one token stands for: a text of more than ``n * longest_token``
        characters is more than ``n`` tokens, known without tokenising it. (A byte-level
        vocabulary's entries hold one character per byte, at least as many as the text they cover.)"""
        return max((len(token) for token in self.tokenizer.get_vocab()), default=1)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    @property
    def eos_token_id(self) -> int:
        eos = self.model.generation_config.eos_token_id
        if isinstance(eos, (list, tuple)):
            eos = eos[0]
        return int(eos if eos is not None else self.tokenizer.eos_token_id)

    def _decode(self, ids: Sequence[int]) -> str:
        # eos / pad dropped by id, not with skip_special_tokens: RoG's <PATH>, <SEP>, </PATH> may be special
        drop = {self.eos_token_id, self._pad}
        return self.tokenizer.decode([i for i in ids if i not in drop], skip_special_tokens=False).strip()

    # -- decoding
    def _run(
        self, prompt: str, allowed_tokens: AllowedTokens | None, stop: StopWhen | None, **options: Any
    ) -> tuple[Any, int]:
        import torch

        from engine.models import greedy

        ids = torch.tensor([self.prompt_ids(prompt)], device=self.device)
        start = ids.shape[1]
        cache = self.decoding_cache(False, start, options["max_new_tokens"])
        allowed = None
        if allowed_tokens is not None:

            def allowed(_batch: int, sequence: Any) -> list[int]:
                return list(allowed_tokens(sequence[start:].tolist()))

        criteria = _stopping(self, start, stop)
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                prefix_allowed_tokens_fn=allowed,
                stopping_criteria=criteria,
                return_dict_in_generate=True,
                output_scores=True,
                pad_token_id=self._pad,
                eos_token_id=self.eos_token_id,
                **({} if cache is None else greedy.caching(self.model, cache)),
                **options,
            )
        return out, start

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 256,
        logprobs: bool = False,
        allowed_tokens: AllowedTokens | None = None,
        stop: StopWhen | None = None,
    ) -> Generation:
        out, start = self._run(prompt, allowed_tokens, stop, max_new_tokens=max_new_tokens, num_beams=1)
        new = out.sequences[0, start:].tolist()
        steps = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0].tolist()
        pairs = list(zip(new, steps))
        tokens = tuple(TokenLogprob(self.tokenizer.decode([t]), lp) for t, lp in pairs) if logprobs else None
        self.tokens.add(start, len(new))
        return Generation(self._decode(new), sum(lp for _, lp in pairs), tokens, start, len(new))

    #: prompts decoded together by :meth:`generate_batch` (sorted by length, so padding stays small)
    batch_size: int = 8
    #: at most this many prompt tokens, padding included, in one batch: the forward pass over a
    #: batch's prompts costs about what it costs one by one, so long prompts gain nothing from
    #: batching, and short ones padded to a long one's width lose (RoG's reasoning prompts of up
    #: to 4,096 tokens, eight to a batch, ran slower than one by one on a CPU)
    batch_tokens: int = 4096

    def _chunks(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indexes of prompts sorted by length, cut into batches of at most ``batch_size``
        prompts and ``batch_tokens`` padded tokens (a prompt longer than that alone)."""
        chunks: list[list[int]] = []
        for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
            if chunks and len(chunks[-1]) < self.batch_size and (len(chunks[-1]) + 1) * lengths[i] <= self.batch_tokens:
                chunks[-1].append(i)  # sorted: the new prompt is the widest
            else:
                chunks.append([i])
        return chunks

    def _left_padded(self, encoded: Sequence[list[int]]) -> tuple[Any, Any, int]:
        """Token ids left-padded to one width, their attention mask, and the width."""
        import torch

        width = max(len(e) for e in encoded)
        ids = torch.tensor([[self._pad] * (width - len(e)) + e for e in encoded], device=self.device)
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=self.device)
        return ids, mask, width

    def generate_batch(self, prompts: Sequence[str], *, max_new_tokens: int = 256, stop: BatchStop = None) -> list[Generation]:
        """Greedy decoding of several prompts, in batches of similar length (:meth:`_chunks`),
        each row as :meth:`generate` decodes it alone (:func:`engine.models.greedy.decode`: a
        batch's common prefix is read once, and a row that ends, by its ``stop`` or the end
        token, leaves the batch). A model whose generation config changes the scores before the
        argmax (a repetition penalty …) is decoded prompt by prompt, as :meth:`generate` does."""
        import torch

        from engine.models import greedy

        stops = per_prompt_stops(stop, len(prompts))
        if not greedy.plain_argmax(self.model):
            return super().generate_batch(prompts, max_new_tokens=max_new_tokens, stop=stops)
        encoded = [self.prompt_ids(p) for p in prompts]
        out: list[Generation | None] = [None] * len(encoded)
        for chunk in self._chunks([len(e) for e in encoded]):
            deadlines.check()  # many prompts may take long: past the deadline, none more
            rows = [encoded[i] for i in chunk]
            width = max(len(e) for e in rows)
            rules = [stops[i] for i in chunk]
            cache = self.decoding_cache(any(len(e) < width for e in rows), width, max_new_tokens)
            with torch.no_grad():
                new = greedy.decode(
                    self.model, rows, max_new_tokens=max_new_tokens, eos=self.eos_token_id, pad=self._pad,
                    ended=lambda row, tokens: rules[row] is not None and rules[row](self._decode(tokens)),
                    # the float32 cache lets a prompt attend in the model's precision only when
                    # the prompt is its first update, so a prompt decoded over it is read whole
                    cache=cache, share=cache is None,
                )
            for i, tokens in zip(chunk, new):
                self.tokens.add(len(encoded[i]), len(tokens))
                out[i] = Generation(self._decode(tokens), None, None, len(encoded[i]), len(tokens))
        return out  # type: ignore[return-value]

    def beam_search(
        self,
        prompt: str,
        *,
        num_beams: int = 3,
        num_return: int | None = None,
        max_new_tokens: int = 100,
        allowed_tokens: AllowedTokens | None = None,
        stop: StopWhen | None = None,
    ) -> list[Generation]:
        return self.beam_search_batch(
            [prompt], num_beams=num_beams, num_return=num_return, max_new_tokens=max_new_tokens,
            allowed_tokens=[allowed_tokens], stop=stop,
        )[0]

    def beam_search_batch(
        self,
        prompts: Sequence[str],
        *,
        num_beams: int = 3,
        num_return: int | None = None,
        max_new_tokens: int = 100,
        allowed_tokens: Sequence[AllowedTokens | None] | None = None,
        stop: StopWhen | None = None,
    ) -> list[list[Generation]]:
        """Beam search over prompts left-padded into batches of similar length (:meth:`_chunks`),
        each prompt under its own ``allowed_tokens[i]``: on a CPU a decoding step reads the
        weights once for the whole batch (eight RoG planning prompts: 5.2 s one by one, 2.9 s
        together, the same plans)."""
        rules = list(allowed_tokens) if allowed_tokens is not None else [None] * len(prompts)
        if len(rules) != len(prompts):
            raise ValueError(f"{len(rules)} allowed-token rules for {len(prompts)} prompts")
        if all(r is None for r in rules):
            return self._beam_search(prompts, num_beams, num_return, max_new_tokens, stop, None)

        def allowed(rows: StepRows) -> list[Sequence[int] | None]:
            return [None if rules[i] is None else rules[i](generated) for i, generated in rows]  # type: ignore[misc]

        return self._beam_search(prompts, num_beams, num_return, max_new_tokens, stop, allowed)

    def beam_search_steps(
        self,
        prompts: Sequence[str],
        *,
        num_beams: int = 3,
        num_return: int | None = None,
        max_new_tokens: int = 100,
        stop: StopWhen | None = None,
    ) -> Decoding:
        """:meth:`beam_search_batch` decoded step by step (:func:`engine.models.steps.stepwise`):
        each step's rows, of every prompt of a chunk, go to the caller at once."""
        from engine.models.steps import stepwise

        return stepwise(lambda ask: self._beam_search(prompts, num_beams, num_return, max_new_tokens, stop, ask))

    def _beam_search(
        self,
        prompts: Sequence[str],
        num_beams: int,
        num_return: int | None,
        max_new_tokens: int,
        stop: StopWhen | None,
        allowed: Callable[[StepRows], list[Sequence[int] | None]] | None,
    ) -> list[list[Generation]]:
        """The beam search of :meth:`beam_search_batch`, each step's rows masked to what
        ``allowed`` gives them (None: no mask)."""
        import torch
        from transformers import LogitsProcessorList

        num_return = num_return or num_beams
        if num_return > num_beams:
            raise InvalidInputError(f"cannot return {num_return} sequences from {num_beams} beams")
        encoded = [self.prompt_ids(p) for p in prompts]
        out: list[list[Generation]] = [[] for _ in prompts]
        for chunk in self._chunks([len(e) for e in encoded]):
            deadlines.check()
            ids, mask, width = self._left_padded([encoded[i] for i in chunk])
            processors = None
            if allowed is not None:
                processors = LogitsProcessorList([_Allowed(allowed, list(chunk), width, num_beams, len(self.tokenizer))])
            criteria = _stopping(self, width, stop)
            with torch.no_grad():
                result = self.model.generate(
                    input_ids=ids, attention_mask=mask, do_sample=False, num_beams=num_beams, num_return_sequences=num_return,
                    early_stopping=False, max_new_tokens=max_new_tokens, logits_processor=processors,
                    stopping_criteria=criteria, return_dict_in_generate=True, output_scores=num_beams > 1,
                    pad_token_id=self._pad, eos_token_id=self.eos_token_id,
                )
            scores = result.sequences_scores.tolist() if num_beams > 1 else [None] * len(result.sequences)
            written = [0] * len(chunk)
            for row, (sequence, score) in enumerate(zip(result.sequences, scores)):
                new = sequence[width:].tolist()
                written[row // num_return] += self._generated(new)
                out[chunk[row // num_return]].append(Generation(self._decode(new), score))
            for i, count in zip(chunk, written):
                self.tokens.add(len(encoded[i]), count)
        return out

    def _generated(self, new: Sequence[int]) -> int:
        """How many of a returned sequence's tokens the model generated: up to its end token
        (included), before the padding of a sequence that ended before the others."""
        for i, token in enumerate(new):
            if token == self.eos_token_id:
                return i + 1
            if token == self._pad:
                return i
        return len(new)

    def token_logprobs(self, prompt: str, continuation: str) -> list[TokenLogprob]:
        import torch

        context = self.prompt_ids(prompt)
        target = self.encode(continuation)
        if not target:
            return []
        self.tokens.add(len(context) + len(target), 0)
        ids = torch.tensor([context + target], device=self.device)
        with torch.no_grad():
            logits = self.model(input_ids=ids).logits[0, len(context) - 1 : -1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(target, device=self.device)[:, None])[:, 0]
        return [TokenLogprob(self.tokenizer.decode([t]), lp) for t, lp in zip(target, logp.tolist())]

    #: continuation tokens per forward pass in :meth:`score_many` (each costs a row of logits)
    score_tokens = 512
    #: prompts whose key/value caches :meth:`score_many` keeps: a prompt that begins like a
    #: recent one (a method's fixed instructions, the next step of a question) runs only the rest
    prefix_caches = 4

    def score_batch(self, prompt: str, continuations: Sequence[str], *, eos: bool = False) -> list[list[float]]:
        return self.score_many([(prompt, continuations)], eos=eos)[0]

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]], *, eos: bool = False
    ) -> list[list[list[float]]]:
        contexts = [self.prompt_ids(prompt) for prompt, _ in requests]
        targets = [[self.encode(c) + ([self.eos_token_id] if eos else []) for c in continuations]
                   for _, continuations in requests]
        scores: list[list[list[float]]] = [[] for _ in requests]
        asked = [i for i, t in enumerate(targets) if t]
        self.tokens.add(sum(len(contexts[i]) + sum(len(t) for t in targets[i]) for i in asked), 0)
        for group in _alike(contexts, asked, self.batch_size, self.batch_tokens):
            deadlines.check()
            for i, request_scores in zip(group, self._score_group([contexts[i] for i in group], [targets[i] for i in group])):
                scores[i] = request_scores
        return scores

    def _score_group(self, contexts: list[list[int]], targets: list[list[list[int]]]) -> list[list[list[float]]]:
        """:meth:`score_many` of prompts that begin alike. The prompt and the tokens each prompt's
        continuations all start with (its head) run once per prompt: alone over the cache of a
        recent prompt it begins like, or, for several, their rests left-padded in one pass over
        their common beginning's cache. The rest of every continuation runs beside the other
        continuations of its prompt (:meth:`_score_rests`)."""
        import torch

        from engine.models import greedy

        heads = [_common_prefix(t) for t in targets]
        rows = [c + t[0][:h] for c, t, h in zip(contexts, targets, heads)]
        common = min(_common_prefix(contexts), min(len(c) for c in contexts) - 1)
        with torch.no_grad():
            if len(rows) == 1 or common < 1:
                if len(rows) > 1:  # nothing in common: each alone
                    return [s for c, t in zip(contexts, targets) for s in self._score_group([c], [t])]
                cache, logits = self._run_prefix(rows[0], len(contexts[0]) - 1)
                mask = torch.ones((1, len(rows[0])), dtype=torch.long)
                lasts = [logits]  # positions len(context) - 1 … len(row) - 1
            else:
                cache, _ = self._run_prefix(rows[0][:common], common)
                cache.batch_repeat_interleave(len(rows))
                tails = [r[common:] for r in rows]
                width = max(len(t) for t in tails)
                ids = torch.tensor([[self._pad] * (width - len(t)) + t for t in tails])
                mask = torch.tensor([[1] * common + [0] * (width - len(t)) + [1] * len(t) for t in tails])
                # left padding: every row ends in the last column; each real token keeps its own position
                positions = torch.tensor([[common] * (width - len(t)) + list(range(common, common + len(t))) for t in tails])
                keep = max(heads) + 1
                out = self.model(
                    input_ids=ids.to(self.device), attention_mask=mask.to(self.device), position_ids=positions.to(self.device),
                    logits_to_keep=keep, **greedy.caching(self.model, cache),
                )
                cache = greedy.returned_cache(out)
                lasts = [out.logits[k, keep - 1 - h:] for k, h in enumerate(heads)]
            scores: list[list[list[float]]] = []
            rests: list[list[tuple[int, list[int]]]] = []  # per prompt: (continuation, its tokens past the head) to run
            for last, target, head in zip(lasts, targets, heads):
                logp = torch.log_softmax(last.float(), dim=-1)
                shared = [float(logp[j, t]) for j, t in enumerate(target[0][:head])]
                scores.append([shared + ([float(logp[-1, t[head]])] if len(t) > head else []) for t in target])
                rests.append([(j, t[head:]) for j, t in enumerate(target) if len(t) > head + 1])
            self._score_rests(cache, mask, rests, scores)
        return scores

    def _score_rests(
        self, cache: Any, mask: Any, rests: list[list[tuple[int, list[int]]]], scores: list[list[list[float]]]
    ) -> None:
        """Add to ``scores`` the log-probability of every token of each rest ``(j, tokens)`` of
        prompt k (``rests[k]``) but the first (already scored), over ``cache``: row k holds
        prompt k, ``mask`` its real positions. Prompt k's rests run side by side in row k, each
        attending to the prompt and to its own tokens only (a 4-D mask) at its own positions, so a
        rest needs no copy of its prompt's cache, however long the prompt; at most
        :attr:`score_tokens` per pass. The passes add to ``cache`` and crop it back."""
        import torch

        from engine.models import greedy

        prompts, cached = mask.shape
        lengths = mask.sum(dim=1)  # each prompt's real tokens: the position of its next one
        queues = [list(reversed(queue)) for queue in rests]  # popped from the end
        most = max(1, self.score_tokens // prompts)
        dtype = self.model.dtype
        while any(queues):
            deadlines.check()
            packed: list[list[tuple[int, list[int], int]]] = []  # per prompt: (continuation, rest, first column)
            width = 0
            for queue in queues:
                row: list[tuple[int, list[int], int]] = []
                used = 0
                while queue and (not row or used + len(queue[-1][1]) - 1 <= most):
                    j, r = queue.pop()
                    row.append((j, r, used))
                    used += len(r) - 1  # a rest's last token is read, never run
                packed.append(row)
                width = max(width, used)
            ids = torch.full((prompts, width), self._pad, dtype=torch.long)
            positions = lengths[:, None].repeat(1, width)  # padding columns: any position, attending to the prompt
            allowed = torch.zeros((prompts, width, cached + width), dtype=torch.bool)
            allowed[:, :, :cached] = mask[:, None, :].bool()
            for k, row in enumerate(packed):
                for _, r, first in row:
                    n = len(r) - 1
                    ids[k, first:first + n] = torch.tensor(r[:-1])
                    positions[k, first:first + n] = lengths[k] + torch.arange(n)
                    allowed[k, first:first + n, cached + first:cached + first + n] = torch.ones((n, n), dtype=torch.bool).tril()
            bias = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
            logits = self.model(
                input_ids=ids.to(self.device), attention_mask=bias.to(self.device), position_ids=positions.to(self.device),
                **greedy.caching(self.model, cache),
            ).logits
            cache.crop(-width)
            step = torch.log_softmax(logits.float(), dim=-1)
            for k, row in enumerate(packed):
                for j, r, first in row:
                    scores[k][j].extend(float(step[k, first + q, r[q + 1]]) for q in range(len(r) - 1))

    def _run_prefix(self, ids: list[int], reusable: int) -> tuple[Any, Any]:
        """Run ``ids`` (no grad), reusing at most ``reusable`` tokens of the longest cached
        beginning: its key/value cache (a copy, the caller's to change; the cache itself is kept
        for later prompts) and the logits of positions ``reusable`` on (only those: the
        vocabulary projection of every prompt position would cost about a fifth of a 135M
        model's forward pass). With ``reusable == len(ids)`` no
        logits are wanted: a cache that holds all of ``ids`` is returned without a pass."""
        import copy

        import torch

        from engine.models import greedy

        best, start = None, 0
        for entry in self._prefixes:
            n = min(_common_prefix([entry[0], ids]), reusable)
            if n > start:
                best, start = entry, n
        cache = None
        if best is not None:
            cache = copy.deepcopy(best[1])
            if start < len(best[0]):
                cache.crop(start - len(best[0]))  # transformers 5 crops by a negative count of tokens to drop
            if start == len(ids):
                return cache, None
        out = self.model(
            input_ids=torch.tensor([ids[start:]], device=self.device),
            logits_to_keep=max(len(ids) - reusable, 1),  # 0 would keep every position's
            **greedy.caching(self.model, cache),
        )
        cache = greedy.returned_cache(out)
        self._prefixes.insert(0, (ids, cache))
        del self._prefixes[self.prefix_caches:]
        return copy.deepcopy(cache), out.logits[0]


def _alike(contexts: Sequence[list[int]], members: Sequence[int], most: int, tokens: int) -> list[list[int]]:
    """``members`` (indexes of ``contexts``) in groups of at most ``most`` prompts and ``tokens``
    tokens padded to the group's widest, in order: a prompt joins the group whose first prompt it
    shares the longest beginning with, when that is at least half of it (a method's fixed
    instructions), else starts a group."""
    groups: list[list[int]] = []
    for i in members:
        shared = [
            (_common_prefix([contexts[g[0]], contexts[i]]), g) for g in groups
            if len(g) < most and (len(g) + 1) * max(len(contexts[j]) for j in [*g, i]) <= tokens
        ]
        n, best = max(shared, key=lambda s: s[0], default=(0, None))
        if best is not None and n >= 1 and 2 * n >= len(contexts[i]):
            best.append(i)
        else:
            groups.append([i])
    return groups


def _common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """The length of the longest prefix every sequence starts with."""
    first, n = sequences[0], min(len(s) for s in sequences)
    for j in range(n):
        if any(s[j] != first[j] for s in sequences):
            return j
    return n


class _Allowed:
    """A transformers logits processor: each row's scores masked to the tokens ``allowed``
    gives it (None: every token of the tokenizer), as ``prefix_allowed_tokens_fn`` masks them;
    ``allowed`` sees every row of the step at once. ``prompts[b]`` is the index, in the
    caller's list, of the chunk's b-th prompt; rows are ``num_beams`` per prompt."""

    def __init__(
        self, allowed: Callable[[StepRows], list[Sequence[int] | None]], prompts: list[int], width: int, num_beams: int, tokens: int
    ) -> None:
        self.allowed, self.prompts, self.width, self.num_beams, self.tokens = allowed, prompts, width, num_beams, tokens

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        rows = [(self.prompts[i // self.num_beams], row[self.width:].tolist()) for i, row in enumerate(input_ids)]
        mask = torch.full_like(scores, -math.inf)
        for i, tokens in enumerate(self.allowed(rows)):
            mask[i, list(tokens) if tokens is not None else slice(0, self.tokens)] = 0
        return scores + mask


def _stopping(lm: TransformersLM, start: int, stop: StopWhen | None) -> Any:
    """``generate``'s stopping criteria: the context's deadline, and ``stop`` on the text
    generated after ``start`` when given."""
    from transformers import StoppingCriteriaList

    return StoppingCriteriaList([_deadline_stop, *([_TextStop(lm, start, stop)] if stop is not None else [])])


def _deadline_stop(input_ids: Any, scores: Any, **kwargs: Any) -> Any:
    """A transformers stopping criterion that stops no sequence but raises at the context's
    deadline (:mod:`engine.deadlines`): ``generate`` asks it after every decoding step."""
    import torch

    deadlines.check()
    return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class _TextStop:
    """A transformers stopping criterion (``StoppingCriteriaList`` only calls it): a sequence
    is done once ``stop`` holds for the text generated after ``start``, decoded as
    :meth:`TransformersLM._decode` does. Beam search asks it of every candidate beam."""

    def __init__(self, lm: TransformersLM, start: int, stop: StopWhen) -> None:
        self.lm, self.start, self.stop = lm, start, stop

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        done = [self.stop(self.lm._decode(row[self.start:].tolist())) for row in input_ids]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

