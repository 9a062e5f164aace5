"""The torch device, chosen once per process and reported."""
from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def pick_device(preferred: str | None = None) -> str:
    """``cuda`` when available, CPU otherwise; ``preferred`` (or ``$KGQA_DEVICE``) overrides."""
    import torch

    choice = preferred or os.environ.get("KGQA_DEVICE")
    if choice is None:
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    log.info("torch device: %s", choice)
    return choice
