"""The usual causal-LM fine-tuning loss, the baseline of :mod:`benchmarks.training`: every
position projected to the vocabulary, then cross-entropy over the labelled positions. It equals
:func:`engine.models.sft.target_loss`, which projects only the positions that carry loss."""
from __future__ import annotations

from typing import Any

from engine.models.sft import IGNORE


def full_vocab_loss(model: Any, ids: Any, mask: Any, labels: Any) -> tuple[Any, int]:
    """The summed next-token cross-entropy over labelled positions and their count, from the
    logits of every position."""
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits
    shifted = labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), shifted.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return loss, int((shifted != IGNORE).sum())
