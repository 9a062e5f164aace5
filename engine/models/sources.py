"""Where a named model comes from: a local path, or a hub id already in the local hub cache.

The engine never downloads weights while it runs. A name that can only be a path (it starts with
``/``, ``.`` or ``~``, ends with ``.gguf``, has a backslash or more than one ``/``, or its first
part is a local directory) and is not there fails at once, naming the path and how to get the
model. Any other name (``org/name`` or ``name``) is a hub id: it loads from the local hub cache
only (``local_files_only``), and one that is not cached fails at once the same way, saying how
to fetch it. Nothing here opens a network connection.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError


@dataclass(frozen=True)
class ModelSource:
    """What a loader reads: ``path`` (a local path, or the hub id itself) and the options its
    ``from_pretrained`` takes (``local_files_only`` for a hub id, read from the cache)."""

    path: str
    options: dict[str, Any] = field(default_factory=dict)


def looks_like_path(name: str) -> bool:
    """True when ``name`` cannot be a hub id (which is ``org/name`` or ``name``, without a
    leading ``.``), so it can only mean a local file or directory."""
    parts = name.split("/")
    return (
        name.startswith(("/", ".", "~"))
        or name.endswith(".gguf")
        or "\\" in name
        or len(parts) > 2
        or (len(parts) == 2 and Path(parts[0]).is_dir())
    )


def model_source(name: str, what: str, get_it: str) -> ModelSource:
    """The source of the model ``name`` names; ``what`` says what kind of model it is and
    ``get_it`` how to get one, for the error a missing one gets (InvalidInputError)."""
    path = Path(name).expanduser()
    if path.exists():
        return ModelSource(str(path))
    if looks_like_path(name):
        raise InvalidInputError(f"{what} {name!r}: there is no {path.absolute()}; {get_it}")
    if _in_hub_cache(name):
        return ModelSource(name, {"local_files_only": True})
    raise InvalidInputError(
        f"{what} {name!r}: there is no {path.absolute()}, and as a hub id it is not in the local hub cache "
        f"(the engine never downloads a model while it runs: fetch it first with `hf download {name}`); {get_it}"
    )


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return (Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")).is_dir()
