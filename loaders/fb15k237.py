"""FB15k-237 as a Freebase KB: its files, what it holds, and where Freebase's relations land in it.

FB15k-237 writes a Freebase relation as a path (``film.film.directed_by`` is
``/film/film/directed_by``) and a pair through a CVT node, ``r1`` (subject → CVT) then ``r2``
(CVT → object), as one compound relation ``/r1./r2``. Each relation is stored in one
direction only (inverse relations were removed when the set was made), so a Freebase relation
may be there only as its reverse property (GrailQA's ``reverse_properties``:
``film.film.directed_by`` ↔ ``film.director.film``), and a CVT pair only as the compound of
the two reverses in the other order.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidInputError, ParseError
from engine.graph import Literal, Triple
from engine.results import LoadReport
from engine.store import Store
from loaders.load import load_files
from loaders.source import Reject
from loaders.tabular import read_entity_names, read_tsv

#: the triple files of the set (each optional, at least one needed), then its names
TRIPLE_FILES = ("train", "valid", "test")
NAMES_FILE = "entity2text"


@dataclass(frozen=True)
class Hop:
    """One KB edge of a walk: the relation as stored, walked in its stored direction or not."""

    relation: str
    forward: bool


def slash(relation: str) -> str:
    """FB15k-237's spelling of a dotted Freebase relation."""
    return "/" + relation.replace(".", "/")


def _find(directory: Path, stem: str) -> Path | None:
    for name in (f"{stem}.txt", f"{stem}.txt.gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def kb_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The triple files of an FB15k-237 directory (``train``, ``valid``, ``test``; ``.txt`` or
    ``.txt.gz``), then its ``entity2text`` names."""
    folder = Path(directory)
    triples = [p for p in (_find(folder, stem) for stem in TRIPLE_FILES) if p is not None]
    names = _find(folder, NAMES_FILE)
    if not triples or names is None:
        raise InvalidInputError(
            f"{str(folder)!r} is not an FB15k-237 directory: it needs train.txt(.gz) (and valid, test if "
            f"any) and entity2text.txt(.gz), e.g. ../shared/data/fb15k237"
        )
    return [*triples, names]


def read_reverse_properties(ontology: str | os.PathLike[str]) -> dict[str, str]:
    """Each relation of GrailQA's ``reverse_properties`` (in an ontology folder) mapped to its
    reverse, both ways."""
    folder = Path(ontology)
    path = next((p for p in (folder / "reverse_properties.gz", folder / "reverse_properties") if p.is_file()), None)
    if path is None:
        raise InvalidInputError(
            f"no reverse_properties(.gz) in {str(folder)!r}: give GrailQA's ontology folder, e.g. ../shared/data/freebase-ontology"
        )
    opener = gzip.open if path.suffix == ".gz" else open
    reverse: dict[str, str] = {}
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        for n, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2:
                raise ParseError(f"expected 'relation reverse', found {len(fields)} field(s)", source=str(path), line=n)
            reverse[fields[0]] = fields[1]
            reverse[fields[1]] = fields[0]
    return reverse


@dataclass(frozen=True)
class FB15k237:
    """What an FB15k-237 KB holds: its relations, the entities of its triples, their names,
    and Freebase's reverse properties to find relations stored the other way."""

    relations: frozenset[str]
    entities: frozenset[str]
    names: dict[str, str]
    reverse: dict[str, str]
    triples: int

    def hops(self, relation: str) -> list[Hop]:
        """Where a Freebase relation walked forward is in the KB: as stored, or its reverse
        property walked backwards (both when the KB has both; a relation that is its own
        reverse, such as a sibling or spouse pair, is stored once per pair, so either)."""
        found = [Hop(slash(relation), True)] if slash(relation) in self.relations else []
        back = self.reverse.get(relation)
        if back is not None and slash(back) in self.relations:
            found.append(Hop(slash(back), False))
        return found

    def cvt_hops(self, first: str, second: str) -> list[Hop]:
        """Where a pair through a CVT node is in the KB: its compound relation, or the compound
        of the reverses (``/rev(second)./rev(first)``) walked backwards."""
        found = []
        compound = slash(first) + "." + slash(second)
        if compound in self.relations:
            found.append(Hop(compound, True))
        back_first, back_second = self.reverse.get(first), self.reverse.get(second)
        if back_first is not None and back_second is not None:
            inverse = slash(back_second) + "." + slash(back_first)
            if inverse in self.relations:
                found.append(Hop(inverse, False))
        return found


def read_kb(directory: str | os.PathLike[str], ontology: str | os.PathLike[str]) -> FB15k237:
    """The KB of an FB15k-237 directory (:func:`kb_files`), with the reverse properties of
    GrailQA's ontology folder. The files are expected well formed: a bad line raises."""
    files = kb_files(directory)
    relations: set[str] = set()
    entities: set[str] = set()
    names: dict[str, str] = {}
    triples = 0
    for path in files:
        reader = read_entity_names if path is files[-1] else read_tsv
        for item in reader(path):
            if isinstance(item, Reject):
                raise ParseError(item.reason, source=str(path), line=item.line_no)
            assert isinstance(item, Triple)
            if isinstance(item.object, Literal):
                names.setdefault(item.subject, item.object.value)
                continue
            triples += 1
            relations.add(item.relation)
            entities.update((item.subject, item.object))  # type: ignore[arg-type]
    return FB15k237(frozenset(relations), frozenset(entities), names, read_reverse_properties(ontology), triples)


def ensure_loaded(store: Store, directory: str | os.PathLike[str], kb: FB15k237, progress: bool = True) -> LoadReport | None:
    """Load the KB's files into ``store`` when it is empty (the report), or check that it
    already holds the KB: its relations, and at least as many of their edges as the KB's
    files hold (a store loaded with ``train.txt`` alone has every relation but not the
    ``valid`` and ``test`` edges, and would give a smaller slice without a word); None."""
    if store.count_triples() == 0:
        return load_files(store, kb_files(directory), progress=progress)
    stats = store.stats()
    missing = sorted(kb.relations - set(stats.relations))
    held = sum(stats.relations.get(r, 0) for r in kb.relations)
    if missing or held < kb.triples:
        lacks = (
            f"{len(missing)} of its relations are missing, e.g. {missing[0]}" if missing
            else f"{held:,} of its {kb.triples:,} edges are there"
        )
        raise InvalidInputError(
            f"the store {store.uri} holds {stats.triples:,} triples but not FB15k-237 ({lacks}): give an empty "
            f"store, or load the whole KB into it first with "
            f"kgqa load {' '.join(str(p) for p in kb_files(directory))} --store {store.uri}"
        )
    return None
