"""The triple formats by name, and telling a file's format from its name or first line.

| format | input |
|---|---|
| ``ntriples`` | W3C N-Triples |
| ``freebase`` | the Freebase RDF dump (tab-separated N-Triples terms, ``ns:`` prefixes allowed), filtered |
| ``metaqa`` | ``subject|relation|object`` (MetaQA ``kb.txt``) |
| ``tsv`` | ``subject<TAB>relation<TAB>object`` (FB15k-237, PathQuestion KBs) |
| ``entity-names`` | ``mid<TAB>name`` (FB15k-237 ``entity2text``) |
| ``rog`` | RoG question files (JSONL or parquet) with a per-question ``graph`` |

Every triple reader is a generator over one file that yields :class:`~engine.graph.Triple`
objects and, for a line that cannot become a triple, a :class:`~loaders.source.Reject` carrying
its 1-based line number, so one bad line never stops a load. Every reader takes ``check``, a
store's :meth:`~engine.store.Store.term_check`: a triple beyond what that store keeps exactly
is a reject too. Lines a reader filters out on
purpose (comments, the Freebase filters) yield nothing.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidInputError
from loaders.freebase import read_freebase
from loaders.ntriples import read_ntriples
from loaders.source import Item, PathOrSource, Source
from loaders.tabular import read_entity_names, read_metaqa, read_rog, read_tsv


@dataclass(frozen=True)
class Format:
    """A triple format: its reader and whether the reader takes a ``namespace``."""

    name: str
    read: Callable[..., Iterator[Item]]
    namespaced: bool
    description: str


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("ntriples", read_ntriples, True, "W3C N-Triples (.nt)"),
        Format("freebase", read_freebase, True, "the Freebase RDF dump (freebase-rdf-*.gz), filtered"),
        Format("metaqa", read_metaqa, False, "subject|relation|object (MetaQA kb.txt)"),
        Format("tsv", read_tsv, False, "subject<TAB>relation<TAB>object (FB15k-237, PathQuestion KBs)"),
        Format("entity-names", read_entity_names, False, "id<TAB>name (FB15k-237 entity2text)"),
        Format("rog", read_rog, False, "RoG question files with a graph column (.jsonl, .parquet)"),
    )
}


def format_names() -> str:
    return ", ".join(f"{f.name} ({f.description})" for f in FORMATS.values())


def get_format(name: str) -> Format:
    if name not in FORMATS:
        raise InvalidInputError(f"unknown format {name!r}: use one of {format_names()}")
    return FORMATS[name]


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a file, from its name, else from its first non-blank line."""
    p = Path(path)
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    lowered = name.lower()
    if lowered.startswith("freebase-rdf") or lowered.endswith(".ttl"):
        return "freebase"
    if lowered.endswith(".nt"):
        return "ntriples"
    if lowered.endswith((".jsonl", ".parquet")):
        return "rog"
    if lowered.startswith("entity2text"):
        return "entity-names"
    found, first = _sniff(p)
    if found is not None:
        return found
    if first is None:
        raise InvalidInputError(f"cannot tell the format of {str(p)!r}: it is empty; name one of {format_names()}")
    raise InvalidInputError(f"cannot tell the format of {str(p)!r} from its first line {first[:80]!r}; name one of {format_names()}")


def sniff_format(path: str | os.PathLike[str]) -> str | None:
    """The format a file's content looks like (whatever its name says), or None."""
    return _sniff(Path(path))[0]


def _sniff(p: Path) -> tuple[str | None, str | None]:
    """The format the content looks like, and the first non-blank line it was told from."""
    with Source(p) as src:
        head = src.binary().read(4)
        if head == b"PAR1":
            return "rog", None
        src.binary().seek(0)
        first = _first_line(src)
    if first is None:
        return None, None
    if first.startswith(("@prefix", "ns:")) or (first.startswith("<") and first.count("\t") >= 3):
        return "freebase", first
    if first.startswith(("<", "_:")):
        return "ntriples", first
    if first.startswith("{"):
        return "rog", first
    tabs = first.count("\t")
    if tabs == 2:
        return "tsv", first
    if tabs == 1:
        return "entity-names", first
    if tabs == 0 and first.count("|") == 2:
        return "metaqa", first
    return None, first


def _first_line(src: Source) -> str | None:
    try:
        for n, raw in enumerate(src, 1):
            line = raw.decode("utf-8", "replace").strip("\r\n")
            if n == 1:
                line = line.lstrip("\ufeff")
            if line.strip() and not line.startswith("#"):
                return line
            if n >= 1000:
                break
    except (OSError, EOFError, zlib.error) as e:  # damaged gzip data
        raise InvalidInputError(f"cannot read {str(src.path)!r} to tell its format: {e}") from e
    return None


def read_triples(source: PathOrSource, format: str | None = None, **options: object) -> Iterator[Item]:
    """Triples and rejects of one file in ``format`` (detected when None)."""
    if format is None:
        format = detect_format(source.path if isinstance(source, Source) else source)
    return get_format(format).read(source, **options)
