"""Exploration through the store: each GNN layer's frontier expanded in one ``Store.expand`` call.

For a whole batch of questions, the frontier nodes (deduplicated across questions) that are not
in the cache are fetched with ONE ``store.expand(ids, direction="both")`` call per layer; each
met edge becomes ``(relation id, destination)`` where an out-edge keeps the relation's id ``r``
and an in-edge (walked against the stored orientation) gets the inverse id ``r + R``. Every
frontier node also gets an identity self-loop with id ``2R``.

- Node ids (and literals) are interned to dense integers once per process (``Explorer.node``).
- Literals are dead ends (the store's walk semantics): they can be met and be candidates, but
  are never expanded (they keep only their self-loop).
- Relations outside the vocabulary (e.g. ``type.object.name``, or a relation not seen when the
  model was trained) are dropped.
- Hub cap: ``expand``'s ``limit`` is one cap for the whole batch, so it cannot bound each node's
  degree; instead every node's edges are fetched in full and a node with more than
  ``max_degree`` edges keeps a deterministic sample of ``max_degree`` of them (seeded by the
  node id), the same sample every time it is met.
- An LRU cache of per-node neighbourhoods (``cache_size`` nodes) serves later epochs; the first
  fetch of a node is always a real store call (a metered store, :mod:`engine.methods.run`, counts them).
"""
from __future__ import annotations

import random
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.graph import NAME_RELATION, Literal, Term
from engine.identifiers import UNBOUNDED, positive_int
from engine.store import Store

if TYPE_CHECKING:
    import torch

#: node keys of a batch: question index * KEY_STRIDE + node index
KEY_STRIDE = 1 << 40


@dataclass
class RelationVocab:
    """Relation names with their ids; inverse ids are ``id + R``, identity is ``2R``."""

    names: list[str]
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.index = {name: i for i, name in enumerate(self.names)}

    @classmethod
    def from_store(cls, store: Store) -> RelationVocab:
        """Every relation of the store except entity names, sorted."""
        return cls([r for r in store.relation_names() if r != NAME_RELATION])

    @property
    def size(self) -> int:
        """R, the number of relations."""
        return len(self.names)

    @property
    def identity(self) -> int:
        return 2 * len(self.names)

    def describe(self, rel_id: int) -> tuple[str | None, bool]:
        """(relation name, forward?) of an id; the identity is (None, True)."""
        if rel_id == self.identity:
            return None, True
        if rel_id >= self.size:
            return self.names[rel_id - self.size], False
        return self.names[rel_id], True


def relation_text(name: str) -> str:
    """A relation name as words for the text encoder (``people.person.place_of_birth`` →
    ``people person place of birth``)."""
    return " ".join(name.replace(".", " ").replace("_", " ").replace("/", " ").split())


@dataclass
class LayerEdges:
    """Edges met from a frontier: ``src`` indexes the frontier, ``dst`` is a node index."""

    src: torch.Tensor
    rel: torch.Tensor
    dst: torch.Tensor


class Explorer:
    """Per-layer batched expansion through a store, with interned nodes and an LRU cache."""

    def __init__(
        self, store: Store, vocab: RelationVocab, *, max_degree: int | None = 1000, cache_size: int = 200_000
    ) -> None:
        if max_degree is not None:
            positive_int(max_degree, "max_degree")
        self.store = store
        self.vocab = vocab
        self.max_degree = max_degree
        self.cache_size = cache_size
        self.terms: list[Term] = []
        self._ids: dict[Term, int] = {}
        self._cache: OrderedDict[int, tuple[list[int], list[int]]] = OrderedDict()
        self.capped_nodes = 0

    # ----------------------------------------------------------------- nodes
    def node(self, term: Term) -> int:
        """The dense index of a node id or literal (interned on first sight)."""
        found = self._ids.get(term)
        if found is None:
            found = self._ids[term] = len(self.terms)
            self.terms.append(term)
        return found

    def nodes(self, terms: Iterable[Term]) -> list[int]:
        return [self.node(t) for t in terms]

    # ----------------------------------------------------------------- store
    def _fetch(self, wanted: Sequence[int]) -> dict[int, tuple[list[int], list[int]]]:
        """One store call for every wanted node not cached; returns (and caches) what it got."""
        missing = sorted({n for n in wanted if n not in self._cache and not isinstance(self.terms[n], Literal)})
        if not missing:
            return {}
        ids = [self.terms[n] for n in missing]
        edges = self.store.expand(ids, direction="both", limit=UNBOUNDED).edges  # type: ignore[arg-type]
        found: dict[int, tuple[list[int], list[int]]] = {n: ([], []) for n in missing}
        size = self.vocab.size
        for edge in edges:
            rel = self.vocab.index.get(edge.relation)
            if rel is None:
                continue
            rels, dsts = found[self._ids[edge.src]]
            rels.append(rel if edge.forward else rel + size)
            dsts.append(self.node(edge.dst))
        for n, (rels, dsts) in found.items():
            if self.max_degree is not None and len(rels) > self.max_degree:
                keep = sorted(random.Random(zlib.crc32(str(self.terms[n]).encode())).sample(range(len(rels)), self.max_degree))
                rels, dsts = [rels[i] for i in keep], [dsts[i] for i in keep]
                self.capped_nodes += 1
            found[n] = (rels, dsts)
            self._cache[n] = found[n]
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return found

    def _neighbours(self, n: int, fetched: dict[int, tuple[list[int], list[int]]]) -> tuple[list[int], list[int]]:
        """(relation ids, destination nodes) of a node; literals have none."""
        if n in fetched:
            return fetched[n]
        if isinstance(self.terms[n], Literal):
            return [], []
        self._cache.move_to_end(n)
        return self._cache[n]

    def expand(self, frontier: Sequence[int]) -> LayerEdges:
        """Edges out of every frontier node (a node may appear once per question), plus an
        identity self-loop each; ``src`` indexes ``frontier``. One store call at most."""
        import torch

        fetched = self._fetch(frontier)
        src: list[int] = []
        rel: list[int] = []
        dst: list[int] = []
        identity = self.vocab.identity
        for position, n in enumerate(frontier):
            rels, dsts = self._neighbours(n, fetched)
            src.extend([position] * (len(rels) + 1))
            rel.extend(rels)
            rel.append(identity)
            dst.extend(dsts)
            dst.append(n)
        return LayerEdges(
            torch.tensor(src, dtype=torch.long), torch.tensor(rel, dtype=torch.long), torch.tensor(dst, dtype=torch.long)
        )
