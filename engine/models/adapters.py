"""LoRA adapters as models: a LoRA run of ``kgqa lm train`` keeps its unmerged adapter in
``OUT/adapter`` (a few MB, against hundreds for the merged model). An adapter directory is a
``--model`` like any other: :func:`merge_adapter` loads its base (``base_model_name_or_path`` in
peft's adapter config, which the engine sets to the base's ``--model`` name) and merges the
adapter into it, which gives the weights the run merged itself. The adapters the engine ships live in ``engine/models/adapters/<name>/`` and are named by
``<name>`` alone (:func:`shipped_adapter`).
"""
from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError

#: peft's file that marks an adapter directory
CONFIG_FILE = "adapter_config.json"
#: where the shipped adapters are
SHIPPED = Path(__file__).parent / "adapters"


@contextlib.contextmanager
def peft_quietly() -> Iterator[None]:
    """Apply or set up LoRA adapters without transformers' FutureWarning that peft (to 0.21)
    reads the deprecated ``is_gradient_checkpointing``: it came with every adapter loaded and
    every LoRA run, and nothing a user does changes it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def is_adapter(path: str | Path) -> bool:
    """True for a directory holding a LoRA adapter rather than a whole model."""
    return (Path(path) / CONFIG_FILE).is_file() and not (Path(path) / "config.json").is_file()


def shipped_adapter(name: str | None) -> Path | None:
    """The directory of the shipped adapter called ``name``, if there is one."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    path = SHIPPED / name
    return path if is_adapter(path) else None


def adapter_base(adapter_dir: str | Path) -> str:
    """The ``--model`` name of the adapter's base model."""
    path = Path(adapter_dir) / CONFIG_FILE
    try:
        base = json.loads(path.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as e:
        raise InvalidInputError(f"cannot read the LoRA adapter's {path}: {e}") from e
    if not isinstance(base, str) or not base:
        raise InvalidInputError(
            f"the LoRA adapter {str(adapter_dir)!r} does not say which model it adapts: set base_model_name_or_path "
            f"in {path} to the base model's --model name"
        )
    return base


def merge_adapter(lm: Any, adapter_dir: str | Path, dtype: str | None) -> None:
    """Merge the adapter into ``lm`` (a float32 :class:`TransformersLM` of its base), then cast
    the merged weights to ``dtype`` (None or ``auto``: float32)."""
    import torch
    from peft import PeftModel

    from engine.models import float32_cache

    try:
        with peft_quietly():
            model = PeftModel.from_pretrained(lm.model, str(adapter_dir)).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise InvalidInputError(f"cannot apply the LoRA adapter {str(adapter_dir)!r} to {lm.name!r}: {e}") from e
    if dtype not in (None, "auto", "float32"):
        model.to(getattr(torch, dtype))
    model.eval()
    lm.model = model
    lm.float32_decoding = float32_cache.enable(model, lm.device)
