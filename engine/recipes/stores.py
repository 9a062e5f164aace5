"""The stores recipes load: the engine's named ones, loaded once under the work directory and
reused while they hold exactly the recipe's data.

A store is loaded into ``<workdir>/stores/<name>`` (embedded Oxigraph). Beside it,
``<name>.done.json`` records the hash of what it was loaded from (the files' bytes and how they
are read) and its content fingerprint after the load (a hash of its statistics,
:func:`engine.methods.fidelis.index.fingerprint`). A later recipe reuses the store when both
still match; a store this module loaded from other data, or whose load was cut short, is loaded
again; a folder it did not load is never touched. A store whose load builds datasets (the WebQSP
slice) writes them under ``<workdir>/datasets``; a reused one writes them again when one is
missing (a dataset added to the build since).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.cpu_time import cpu_seconds
from engine.errors import InvalidInputError
from engine.outputs import written_whole
from engine.recipes.recipe import StoreSource


def resolve(source: StoreSource, data_directory: Path | None = None) -> StoreSource:
    """``source`` with its relative paths under the datasets directory."""
    relative = [p for p in (*source.files, source.kb, source.webqsp, source.ontology) if p is not None and not p.is_absolute()]
    if not relative:
        return source
    from loaders.datasets import data_dir

    root = data_dir(data_directory)

    def under(p: Path | None) -> Path | None:
        return None if p is None else p if p.is_absolute() else root / p

    return replace(source, files=tuple(under(p) for p in source.files), kb=under(source.kb), webqsp=under(source.webqsp),
                   ontology=under(source.ontology))


def _inputs(source: StoreSource) -> list[Path]:
    """Every file the store is loaded (or its slice built) from."""
    from loaders.fb15k237 import kb_files

    if source.kind == "webqsp-slice":
        assert source.kb and source.webqsp
        ontology = sorted(p for p in source.ontology.iterdir() if p.is_file()) if source.ontology and source.ontology.is_dir() else []
        return [*kb_files(source.kb), source.webqsp, *ontology]
    return list(source.files)


def source_hash(source: StoreSource) -> str:
    """A hash of the store's definition and of every input file's bytes."""
    digest = hashlib.sha256(json.dumps(source.describe(), sort_keys=True).encode())
    for path in _inputs(source):
        if not path.is_file():
            raise InvalidInputError(f"store {source.name!r}: its input {path} is missing (set $KGQA_DATA to the datasets directory)")
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ReadyStore:
    """A loaded store: where it is, its content fingerprint and how it came to be."""

    name: str
    path: Path
    content: str
    seconds: float
    cpu_seconds: float | None  # None from a load that did not record them
    reused: bool
    triples: int

    def open(self) -> Any:
        from engine.open import open_store

        return open_store(str(self.path), create=False, read_only=True)


def marker(path: Path) -> Path:
    return path.with_name(path.name + ".done.json")


def read_record(path: Path) -> dict[str, Any] | None:
    """The JSON object of a marker file at ``path``; None where there is none, and nothing
    recorded (``{}``) where it cannot be read (a write cut short, a file damaged by hand), so that
    what it would have vouched for is done again rather than trusted."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return {}
    return record if isinstance(record, dict) else {}


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write a marker file whole or not at all: a run stopped while writing it leaves the one before."""
    with written_whole(path) as partial:
        partial.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _load_record(path: Path) -> dict[str, Any] | None:
    """What the marker beside the store at ``path`` records of its load (:func:`read_record`)."""
    return read_record(marker(path))


def _content(path: Path) -> tuple[str, int]:
    from engine.methods.fidelis.index import fingerprint
    from engine.open import open_store

    with open_store(str(path), create=False, read_only=True) as store:
        return fingerprint(store), store.count_triples()


def ensure_store(source: StoreSource, workdir: Path, *, data_directory: Path | None = None, progress: bool = True) -> ReadyStore:
    """The store ``source`` defines, under ``workdir/stores``: reused when it holds exactly that
    data, else loaded (a store loaded here before from other data is loaded again)."""
    source = resolve(source, data_directory)
    path = store_directory(workdir, source.name)
    done = marker(path)
    wanted = source_hash(source)
    record = _load_record(path)
    if record is None and path.exists():
        raise InvalidInputError(f"{path} exists but was not loaded by `kgqa reproduce` (no {done.name} beside it): "
                                "remove it, or give another --workdir")
    if (record is not None and record.get("hash") == wanted and record.get("state") == "done" and path.exists()
            and isinstance(record.get("seconds"), (int, float))):
        content, triples = _content(path)
        if content == record.get("content"):
            ready = ReadyStore(source.name, path, content, record["seconds"], record.get("cpu_seconds"), True, triples)
            if any(not f.is_file() for f in built_files(source, workdir)):
                with ready.open() as store:  # the store holds the KB: the build only reads it
                    _build_datasets(source, store, workdir, progress)
            return ready
    if path.exists():  # loaded here before, from other data, or cut short: load it again
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(done, {"hash": wanted, "state": "loading"})
    started, cpu_started = time.perf_counter(), cpu_seconds()
    _load(source, path, workdir, progress)
    seconds, cpu = round(time.perf_counter() - started, 1), round(cpu_seconds() - cpu_started, 1)
    content, triples = _content(path)
    write_record(done, {"hash": wanted, "state": "done", "content": content, "seconds": seconds, "cpu_seconds": cpu,
                        "triples": triples})
    return ReadyStore(source.name, path, content, seconds, cpu, False, triples)


def store_directory(workdir: Path, name: str) -> Path:
    """Where the store a recipe names ``name`` is loaded in a work directory."""
    return workdir / "stores" / name


def loaded_store(workdir: Path, name: str, reproduce: str) -> Path:
    """The store named ``name`` in ``workdir`` when a recipe's load of it finished; otherwise an
    error naming the ``reproduce`` command that loads it (a load cut short is never opened, so
    nothing answers from part of a graph)."""
    path = store_directory(workdir, name)
    record = _load_record(path)
    if not path.is_dir():
        state = "is not there"
    elif record is None:
        state = f"was not loaded by `kgqa reproduce` (no {marker(path).name} beside it)"
    elif record.get("state") != "done":
        state = "was not loaded to the end (its load was cut short)"
    else:
        return path
    raise InvalidInputError(f"store {name!r} in {workdir / 'stores'} {state}: run `{reproduce}`, or give --store")


def built_dataset_dir(workdir: Path) -> Path:
    """Where the datasets a store's load builds are written (``kgqa webqsp build``'s ``--out``)."""
    return workdir / "datasets"


def built_files(source: StoreSource, workdir: Path) -> list[Path]:
    """The dataset files the store's load writes (none but the WebQSP slice's)."""
    from loaders.datasets import BUILT_DATASETS, built_together

    if source.builds is None:
        return []
    return [built_dataset_dir(workdir) / BUILT_DATASETS[name][0] for name in built_together(source.builds)]


def _build_datasets(source: StoreSource, store: Any, workdir: Path, progress: bool) -> None:
    """Build the WebQSP slice's datasets on ``store``, loading the KB into it when it is empty."""
    from loaders.datasets import BUILT_DATASETS
    from loaders.webqsp_slice import build_from_files

    assert source.builds and source.webqsp and source.kb and source.ontology
    out = built_dataset_dir(workdir) / Path(BUILT_DATASETS[source.builds][0]).parent
    build_from_files(source.webqsp, source.kb, store, out, ontology=source.ontology, progress=progress)


def _load(source: StoreSource, path: Path, workdir: Path, progress: bool) -> None:
    from engine.open import open_store

    with open_store(str(path), create=True) as store:
        if source.kind == "webqsp-slice":
            _build_datasets(source, store, workdir, progress)
        else:
            from loaders.load import load_files

            load_files(store, list(source.files), source.format, progress=progress, summary=False)
