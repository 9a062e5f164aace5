"""Store operations as data: one frozen dataclass per call a store makes to its database.

A store's public method (:mod:`engine.store`) validates its arguments, builds one of these,
compiles it through its dialect (``compile(op) -> Compiled(text, params)``, the compilers in
``sparql/`` and ``cypher/``, registered in :mod:`engine.dialects`), runs it, decodes the rows
and applies the limit contract. ``store.explain(op)`` shows the compiled text and parameters
without running anything.

Every operation carries

- ``limit``: the most rows the compiled query may return (None: no LIMIT clause). The store
  asks for one row more than its caller's limit, so that the extra row tells it the answer
  was ``truncated``;
- ``timeout``: seconds the query may run (None: no deadline); past it the store raises
  :class:`engine.errors.QueryTimeoutError`.

Values (ids, literals, search text, numbers) always reach the database as parameters bound at
execution; relation names enter the text only as validated identifiers (a backticked
relationship type in Cypher, an IRI in SPARQL).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from engine.errors import UnsupportedOperationError
from engine.graph import Literal
from engine.identifiers import validate_direction
from engine.sexpr.tree import Top


@dataclass(frozen=True, kw_only=True)
class Op:
    """The fields every operation has; ``name`` is the compiler method that compiles it."""

    name: ClassVar[str] = ""
    limit: int | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class Relations(Op):
    """Rows (id, relation, direction, count): the edges adjacent to each id."""

    name: ClassVar[str] = "relations"
    ids: tuple[str, ...]
    direction: str

    def __post_init__(self) -> None:
        validate_direction(self.direction)


@dataclass(frozen=True)
class LiteralRelations(Op):
    """Rows (literal, relation, count): the edges entering each literal (all ``in``)."""

    name: ClassVar[str] = "literal_relations"
    literals: tuple[Literal, ...]


@dataclass(frozen=True)
class Expand(Op):
    """Edges (src, relation, dst, forward) met in one hop from each id; ``relations`` None
    for any relation."""

    name: ClassVar[str] = "expand"
    ids: tuple[str, ...]
    relations: tuple[str, ...] | None
    direction: str

    def __post_init__(self) -> None:
        validate_direction(self.direction)


@dataclass(frozen=True)
class Walks(Op):
    """Walks of ``len(path)`` hops whose i-th edge carries ``path[i]`` (None: any relation but
    those of ``exclude``), from each seed; with ``pairs``, from pair[0] to pair[1] only
    (``seeds`` ignored). With ``distinct_edges`` a walk never uses one stored edge twice."""

    name: ClassVar[str] = "walks"
    seeds: tuple[str, ...]
    path: tuple[str | None, ...]
    direction: str
    pairs: tuple[tuple[str, str], ...] | None = None
    distinct_edges: bool = True
    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate_direction(self.direction)


@dataclass(frozen=True)
class TwoHopRelations(Op):
    """Rows (id, relation, direction, count) over the edges of the distinct entities reached
    from each id through ``r1``."""

    name: ClassVar[str] = "two_hop_relations"
    ids: tuple[str, ...]
    r1: str
    direction: str

    def __post_init__(self) -> None:
        validate_direction(self.direction)


@dataclass(frozen=True)
class LiteralTwoHopRelations(Op):
    """Like :class:`TwoHopRelations` from literals: the middles are the subjects of the
    ``r1`` edges whose object is the literal."""

    name: ClassVar[str] = "literal_two_hop_relations"
    literals: tuple[Literal, ...]
    r1: str


@dataclass(frozen=True)
class Names(Op):
    """Rows (id, name literal): every ``type.object.name`` literal of each id that is a node of
    the store, and one row (id, None) for a node without one; ids not in the store give none."""

    name: ClassVar[str] = "names"
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Types(Op):
    """Rows (id, class): every ``type.object.type`` entity of each id."""

    name: ClassVar[str] = "types"
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Search(Op):
    """Rows (id, name) of entities whose name matches ``text``: ``exact`` (case-sensitive),
    ``prefix`` or ``contains`` (both case-insensitive); and rows (id, id) of nodes without a
    name whose id matches. ``limit`` bounds each kind; a dialect may return more rows than
    match, which the store filters (:func:`engine.store.text_matches`)."""

    name: ClassVar[str] = "search"
    text: str
    mode: str


@dataclass(frozen=True)
class Execute(Op):
    """An S-expression tree: its answers (column ``v0`` / node columns) or its count."""

    name: ClassVar[str] = "execute"
    tree: Top


@dataclass(frozen=True)
class CountTriples(Op):
    name: ClassVar[str] = "count_triples"


@dataclass(frozen=True)
class CountEntities(Op):
    """Distinct nodes that are not literals."""

    name: ClassVar[str] = "count_entities"


@dataclass(frozen=True)
class Entities(Op):
    """Rows (id): every node that is not a literal (what ``count_entities`` counts)."""

    name: ClassVar[str] = "entities"


@dataclass(frozen=True)
class RelationTypes(Op):
    """The relation names in use (a cheap catalogue lookup where the database keeps one)."""

    name: ClassVar[str] = "relation_types"


@dataclass(frozen=True)
class RelationCounts(Op):
    """Rows (relation, count) for each of ``relations``, or for every relation (None)."""

    name: ClassVar[str] = "relation_counts"
    relations: tuple[str, ...] | None = None


#: every operation, in the order of the README's table
OPERATIONS: tuple[type[Op], ...] = (
    Relations, LiteralRelations, Expand, Walks, TwoHopRelations, LiteralTwoHopRelations,
    Names, Types, Search, Execute, CountTriples, CountEntities, Entities, RelationTypes, RelationCounts,
)  # fmt: skip


class Compiled(NamedTuple):
    """An operation in a dialect: the query text and its parameters (bound at execution)."""

    text: str
    params: dict[str, Any]


class Compiler:
    """A dialect's compiler: ``compile(op)`` dispatches to the method named ``op.name``."""

    #: the dialect's key in :data:`engine.dialects.DIALECTS`
    dialect: ClassVar[str] = ""

    def compile(self, op: Op) -> Compiled:
        method: Callable[[Any], Compiled] | None = getattr(self, op.name, None) if op.name else None
        if method is None:
            raise UnsupportedOperationError(
                f"the {self.dialect} dialect cannot compile the {op.name or type(op).__name__} operation"
            )
        return method(op)


@dataclass(frozen=True)
class CallRecord:
    """One store call, as :attr:`engine.store.Store.listeners` see it: the operation, its
    compiled text (empty for the reference store, which compiles nothing), the rows it
    returned and the seconds it took (compiling, running and decoding)."""

    op: Op
    text: str
    rows: int
    seconds: float

    @property
    def op_name(self) -> str:
        return self.op.name
