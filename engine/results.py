"""The result types every store operation returns, and their JSON form.

Results are frozen dataclasses that turn into plain JSON with :func:`to_json`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from engine.graph import Edge, Literal, Path, Term, Triple


@dataclass(frozen=True)
class RelationCount:
    """``count`` edges carrying ``relation`` leave (``out``) or enter (``in``) the anchor ``id``:
    a node id, or a :class:`Literal` (whose edges all enter it)."""

    id: Term
    relation: str
    direction: str
    count: int


@dataclass(frozen=True)
class TwoHopRelation:
    """Relation ``relation`` touches (``direction`` as seen from the middle node) ``count``
    edges of the nodes reached from the anchor ``id`` (a node id or a :class:`Literal`)
    through ``r1``."""

    id: Term
    r1: str
    relation: str
    direction: str
    count: int


@dataclass(frozen=True)
class SearchHit:
    id: str
    name: str


@dataclass(frozen=True)
class RelationsResult:
    rows: list[RelationCount]
    truncated: bool = False


@dataclass(frozen=True)
class ExpandResult:
    edges: list[Edge]
    truncated: bool = False


@dataclass(frozen=True)
class PathsResult:
    paths: list[Path]
    truncated: bool = False


@dataclass(frozen=True)
class SubgraphResult:
    """Edges (stored orientation, unique) met by a layered BFS, and each node's first layer."""

    edges: list[Triple]
    depth: dict[Term, int] = field(default_factory=dict)
    truncated: bool = False


@dataclass(frozen=True)
class TwoHopResult:
    rows: list[TwoHopRelation]
    truncated: bool = False


@dataclass(frozen=True)
class SearchResult:
    hits: list[SearchHit]
    truncated: bool = False


@dataclass(frozen=True)
class EntitiesResult:
    ids: list[str]
    truncated: bool = False


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False


@dataclass(frozen=True)
class ExecuteResult:
    """The answer of an S-expression: its set of nodes sorted by :func:`term_key`, or, for
    ``(COUNT …)``, ``count`` (and no answers)."""

    answers: list[Term] = field(default_factory=list)
    count: int | None = None


@dataclass(frozen=True)
class StoreStats:
    triples: int
    entities: int
    relations: dict[str, int]


@dataclass
class LoadReport:
    """What a load did: lines read, triples added, duplicates skipped, lines rejected."""

    read: int = 0
    loaded: int = 0
    duplicates: int = 0
    rejected: int = 0
    seconds: float = 0.0
    rejects_file: str | None = None

    @property
    def triples_per_second(self) -> float:
        return self.read / self.seconds if self.seconds > 0 else 0.0


def shown_when_set() -> Any:
    """A dataclass field, None by default, that :func:`to_json` leaves out while it is None: a
    key that a record holds only where it applies (a score that needs the gold structure)."""
    return field(default=None, metadata={"omit_none": True})


def to_json(value: Any) -> Any:
    """Turn results (dataclasses, literals, tuples, dicts keyed by terms) into plain JSON. A
    value with a ``to_json`` method of its own (a literal, a search step) is turned by it; a
    dataclass field declared with :func:`shown_when_set` is left out while it is None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and callable(getattr(value, "to_json", None)):
        return to_json(value.to_json())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {
            f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
            if not (f.metadata.get("omit_none") and getattr(value, f.name) is None)
        }
        if isinstance(value, LoadReport):
            out["triples_per_second"] = round(value.triples_per_second, 1)
        return out
    if isinstance(value, dict):
        if any(isinstance(k, Literal) for k in value):
            return [[to_json(k), to_json(v)] for k, v in value.items()]
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    return value
