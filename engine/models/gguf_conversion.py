"""A GGUF file read as an ordinary transformers model, converted once and kept on disk.

transformers reads a GGUF file's metadata three times (for the config, the tokenizer and the
weights), field by field, and maps its tensor names anew for every tensor: loading the offline
default SmolLM2-135M that way takes about 40 s on a 2-core CPU, of which de-quantising the
weights is 3 s. Within one read the engine has the three metadata reads share one parse of the
file and the name maps share one table (:func:`_parsed_once`), which brings it to about 18 s.
:func:`read_gguf` reads a file once and keeps the result under :func:`cache_root` as a
plain checkpoint (float32 safetensors, config, tokenizer), which later loads read in under a
second. The kept checkpoint holds the same weights, bit for bit, and the same tokenizer
(tests/test_gguf_conversion.py). It is keyed by the file's absolute path, size and modification
time and by the transformers version that converted it, so a changed file or a new transformers
converts again, and a new conversion removes those no load can use any more (of the same file, or
of a file since changed or gone); where the cache cannot be written, each load converts anew (with
a warning).

The model comes back unmarked as quantised: its weights are ordinary float32 tensors, which
train and save like any other model's.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import KGQAWarning

#: the environment variable naming the folder converted models are kept in
CACHE_ENV = "KGQA_CACHE_DIR"


def cache_root() -> Path:
    """``$KGQA_CACHE_DIR``, else ``kgqa-engine`` under ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kgqa-engine"


#: the file in a kept conversion that names the GGUF file it was made from (:func:`_identity`)
SOURCE_FILE = "source.json"


def _identity(gguf: Path) -> dict[str, Any]:
    """What a conversion is kept by: the file's absolute path, size and modification time, and
    the transformers version that converts it."""
    import transformers

    stat = gguf.stat()
    return {"path": str(gguf.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "transformers": transformers.__version__}


def converted_dir(gguf: Path) -> Path:
    """Where the conversion of the GGUF file ``gguf`` (as it is now) is kept."""
    return _kept_at(gguf, _identity(gguf))


def _kept_at(gguf: Path, identity: dict[str, Any]) -> Path:
    """Where the conversion of ``gguf`` with that :func:`_identity` is kept."""
    key = hashlib.sha256(json.dumps([identity[k] for k in ("path", "size", "mtime_ns", "transformers")]).encode())
    return cache_root() / "gguf" / f"{gguf.stem}-{key.hexdigest()[:16]}"


def read_gguf(gguf: Path) -> tuple[Any, Any]:
    """The tokenizer and float32 model the GGUF file ``gguf`` holds: from its kept conversion
    when there is one, else read from the file and kept for the next load."""
    source = _identity(gguf)  # the file as it is now: the key of its conversion and the record kept in it
    target = _kept_at(gguf, source)
    if target.is_dir():
        try:
            return _read_checkpoint(target)
        except Exception as e:  # noqa: BLE001 - whatever damaged the kept copy, the file still holds the model
            warnings.warn(f"the converted model in {target} does not load ({e}); converting {gguf} again", KGQAWarning,
                          stacklevel=2)
            shutil.rmtree(target, ignore_errors=True)
    tokenizer, model = _read_file(gguf)
    try:
        _keep(tokenizer, model, target, source)
    except Exception as e:  # noqa: BLE001 - keeping is a saving of time: a full disk must not cost the model
        warnings.warn(
            f"cannot keep the converted {gguf.name} in {target.parent} ({e}): every load converts it again "
            f"(about 20 s); set {CACHE_ENV} to a writable folder",
            KGQAWarning,
            stacklevel=2,
        )
    else:
        _prune(target, source["path"])
    return tokenizer, model


def _prune(kept: Path, path: str) -> None:
    """Remove the conversions beside ``kept`` (of the file at ``path``) that no load can use
    again: others of the same file (an earlier version of it, or made by another transformers
    version, or kept before conversions named their file) and those whose file has changed or is
    gone (each is keyed by its file as it was). Conversions of other files stay."""
    for other in kept.parent.iterdir():
        if other == kept or other.name.startswith(".") or not other.is_dir():
            continue
        try:
            source = json.loads((other / SOURCE_FILE).read_text())
        except FileNotFoundError:  # kept before conversions named their file: one of this file's name
            if other.name.startswith(kept.name.rsplit("-", 1)[0] + "-"):
                shutil.rmtree(other, ignore_errors=True)
            continue
        except (OSError, ValueError):
            continue
        try:
            stat = os.stat(source["path"])
            stale = source["path"] == path or (stat.st_size, stat.st_mtime_ns) != (source["size"], source["mtime_ns"])
        except OSError:
            stale = True
        except (KeyError, TypeError):
            continue
        if stale:
            shutil.rmtree(other, ignore_errors=True)


_PATCHING = threading.Lock()


@contextlib.contextmanager
def _parsed_once() -> Iterator[None]:
    """Inside the block, gguf's file reader and tensor-name table are made once per argument.

    transformers parses a file's metadata anew for the config, the tokenizer and the weights
    (about 9 s each for the offline model, field by field in Python), and builds gguf's table of
    tensor names once per module of the model (397 times, 13 s). Both are functions of their
    arguments alone, and transformers imports them from gguf at each call, so the block hands it
    cached ones; gguf's own are back when it ends. Where gguf lacks either, nothing changes."""
    import gguf

    with _PATCHING:
        made = {name: getattr(gguf, name, None) for name in ("GGUFReader", "get_tensor_name_map")}
        if None in made.values():
            yield
            return
        for name, make in made.items():
            setattr(gguf, name, functools.lru_cache(maxsize=None)(make))
        try:
            yield
        finally:
            for name, make in made.items():
                setattr(gguf, name, make)


_BAR_PATCHING = threading.Lock()


@contextlib.contextmanager
def _bar_follows_transformers() -> Iterator[None]:
    """Inside the block, transformers' bar over the GGUF tensors obeys its own progress-bar switch.

    transformers draws that bar with plain tqdm, which its ``disable_progress_bar()`` (what
    ``--no-progress`` sets) does not reach; the block hands it transformers' own tqdm, which does."""
    from transformers import modeling_gguf_pytorch_utils as reading
    from transformers.utils import logging

    with _BAR_PATCHING:
        drawn = getattr(reading, "tqdm", None)
        if drawn is None:
            yield
            return
        reading.tqdm = logging.tqdm
        try:
            yield
        finally:
            reading.tqdm = drawn


def _read_file(gguf: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _parsed_once(), _bar_follows_transformers():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # float32: transformers de-quantises into it fastest, and the kept weights are exact
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    quantizer = getattr(model, "hf_quantizer", None)  # transformers marks de-quantised GGUF weights as quantised
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    return tokenizer, model


def _read_checkpoint(directory: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    return tokenizer, model


def _keep(tokenizer: Any, model: Any, target: Path, source: dict[str, Any]) -> None:
    """Write the checkpoint, with ``source`` (the file it was made from) in :data:`SOURCE_FILE`,
    beside ``target`` and rename it there, so a reader never sees half of one; a process that
    converted the same file first wins and this copy is dropped."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    scratch.chmod(0o755)
    try:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        (scratch / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n")
        try:
            scratch.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
