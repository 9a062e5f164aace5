"""The operation vocabulary as JSON: an operation's name and a JSON body → the typed call on a
store → its result as JSON. No web framework here, so that every front end (the HTTP routes of
:mod:`engine.serve.ops_routes`, tools for agents) shares one mapping.

A body's fields are the Python method's own parameter names (``ids``, ``relations``,
``direction``, ``limit``, …; ``text`` and ``params`` for a raw query), checked by a pydantic model
per operation (:data:`OPERATIONS`). A literal is written as :meth:`engine.graph.Literal.to_json`
writes it: ``{"value": "1990", "datatype": "http://www.w3.org/2001/XMLSchema#gYear"}``. Every
result is the Python result in :func:`engine.results.to_json`'s form, with ``truncated``.

Every call runs under :class:`engine.serve.settings.Bounds`: the deadline and the row bound are
the server's unless a request lowers them; a request that asks for more is refused. ``execute``
has no row bound in the store: its answers are cut to the bound afterwards.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from typing import Literal as OneOf

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import DeadlineExceededError, InvalidInputError, clipped
from engine.graph import Literal
from engine.identifiers import DEFAULT_LIMIT, MAX_PAIRS, UNBOUNDED, validate_text
from engine.results import to_json
from engine.serve.errors import RequestBodyError, UnknownOperationError
from engine.serve.json_walk import member, walk
from engine.serve.settings import Bounds, bounded_limit, bounded_timeout
from engine.store import MAX_PARAMETER_DEPTH, MAX_PATH_HOPS, SCHEMA_RELATIONS, Store

#: the most items a list in a body holds (ids, relations, seeds, …): as many as the rows an answer
#: holds by default. Pydantic stops at the first item past it, so a huge list costs no per-item work
MAX_ITEMS = DEFAULT_LIMIT
#: the problems a refused body's message lists; the rest are counted
MAX_PROBLEMS = 10

Direction = OneOf["out", "in", "both"]
_DIRECTION = "which edges to follow: out (stored orientation), in (against it) or both"


class LiteralTerm(BaseModel):
    """A literal: its lexical value with a datatype IRI or a language tag (neither: a plain string)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    value: str
    datatype: str | None = None
    lang: str | None = None

    def term(self) -> Literal:
        return Literal(self.value, self.datatype, self.lang)


class OperationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    timeout: float | None = Field(
        None, gt=0, description="seconds the operation may run (default and most: the server's --timeout)"
    )


class BoundedRequest(OperationRequest):
    limit: int | None = Field(
        None, ge=1, description="most rows to return (default and most: the server's --max-rows); a cut answer says truncated"
    )


_ANCHORS = "node ids, or literals ({value, datatype} or {value, lang}) whose incoming edges count"


class RelationsRequest(BoundedRequest):
    ids: list[str | LiteralTerm] = Field(max_length=MAX_ITEMS, description=_ANCHORS)
    direction: Direction = Field("both", description=_DIRECTION)


class ExpandRequest(BoundedRequest):
    ids: list[str] = Field(max_length=MAX_ITEMS, description="node ids to expand one hop from")
    relations: list[str] | None = Field(
        None, max_length=MAX_ITEMS, description="keep only edges carrying these relations (default: every relation)"
    )
    direction: Direction = Field("both", description=_DIRECTION)


class FollowPathsRequest(BoundedRequest):
    seeds: list[str] = Field(max_length=MAX_ITEMS, description="node ids the walks start from")
    path: list[str] = Field(max_length=MAX_ITEMS, description=f"relation names, one per hop (1 to {MAX_PATH_HOPS})")
    direction: Direction = Field("both", description=_DIRECTION)
    distinct_edges: bool = Field(True, description="false lets a walk use one stored edge more than once")


class SubgraphRequest(BoundedRequest):
    seeds: list[str] = Field(max_length=MAX_ITEMS, description="node ids the breadth-first expansion starts from")
    hops: int = Field(description="layers to expand (1 to 8)")
    direction: Direction = Field("both", description=_DIRECTION)
    relations: list[str] | None = Field(None, max_length=MAX_ITEMS, description="follow only these relations (default: every relation)")


class ShortestPathsRequest(BoundedRequest):
    sources: list[str] = Field(max_length=MAX_ITEMS, description="node ids the paths start from")
    targets: list[str] = Field(
        max_length=MAX_ITEMS, description=f"node ids the paths end at (sources × targets: at most {MAX_PAIRS:,} pairs)"
    )
    max_hops: int = Field(3, description="longest path (1 to 8)")
    exclude: list[str] = Field(
        list(SCHEMA_RELATIONS), max_length=MAX_ITEMS, description="relations no path may use (default: type.object.type and type.object.name)"
    )


class TwoHopRelationsRequest(BoundedRequest):
    ids: list[str | LiteralTerm] = Field(max_length=MAX_ITEMS, description=_ANCHORS)
    r1: str = Field(description="the relation of the first hop")
    direction: Direction = Field("both", description="which edges the first hop follows: out, in or both")


class IdsRequest(OperationRequest):
    ids: list[str] = Field(max_length=MAX_ITEMS, description="node ids")


class SearchRequest(BoundedRequest):
    text: str = Field(description="the name (or id of a node without one) to look for")
    mode: OneOf["exact", "prefix", "contains"] = Field(
        "exact", description="exact (case-sensitive), prefix or contains (both case-insensitive)"
    )
    limit: int | None = Field(None, ge=1, description="most hits (default 10, at most the server's --max-rows)")


class ExecuteRequest(BoundedRequest):
    sexpr: str = Field(description="an S-expression with GrailQA's semantics, e.g. (JOIN directed_by m.0abc)")


class QueryRequest(BoundedRequest):
    text: str = Field(description="a read-only SPARQL or Cypher query in the store's own language, with $name parameters")
    params: dict[str, Any] | None = Field(
        None,
        description="the values of its $name parameters: strings (ids), numbers, booleans, literals "
        "({value, datatype} or {value, lang}) or lists of them",
    )


@dataclass(frozen=True)
class Operation:
    """One operation of the vocabulary as a front end offers it."""

    name: str
    summary: str
    request: type[OperationRequest]
    #: (store, request, timeout, limit or None) → the result as JSON
    call: Callable[[Store, Any, float, int | None], dict[str, Any]]
    #: the row bound when a request names none (None: the server's maximum)
    default_limit: int | None = None

    def parse(self, body: Mapping[str, Any] | OperationRequest) -> OperationRequest:
        """The request ``body`` holds; a body that does not fit says which fields are at fault."""
        if isinstance(body, self.request):
            return body
        try:
            return self.request.model_validate(body)
        except ValidationError as e:
            raise RequestBodyError(f"{self.name}: {describe(e.errors())}") from None


def describe(errors: Sequence[Mapping[str, Any]]) -> str:
    """Pydantic's errors as one part per field at fault: ``ids[2]: Input should be a valid string``
    (FastAPI's leading ``body`` left out); past :data:`MAX_PROBLEMS` of them, how many more."""
    parts = []
    for item in errors[:MAX_PROBLEMS]:
        where = ""
        for key in item.get("loc", ()):
            if key == "body" and not where:
                continue
            where += f"[{key}]" if isinstance(key, int) else (f".{key}" if where else str(key))
        if item.get("type") == "json_invalid":
            parts.append(f"the body is not valid JSON ({item.get('ctx', {}).get('error', 'a decode error')})")
            continue
        parts.append(clipped(f"{where or 'body'}: {item.get('msg', 'invalid')}", 300))
    if len(errors) > MAX_PROBLEMS:
        parts.append(f"and {len(errors) - MAX_PROBLEMS:,} more")
    return "; ".join(parts)


def _anchors(ids: list[str | LiteralTerm]) -> list[str | Literal]:
    return [i.term() if isinstance(i, LiteralTerm) else i for i in ids]


def check_texts(value: Any, where: str = "") -> None:
    """Refuse ``value`` (a body's JSON) if a string in it, or a key, is not valid Unicode (a lone
    surrogate, which a JSON ``\\ud800`` escape gives), naming where (``questions[0].id``), at any
    nesting."""
    for at, _, item in walk(value, where):
        if isinstance(item, str):
            validate_text(item, at or "the body")
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str):
                    validate_text(key, f"the key {member(at, key)}")


def _too_deep(value: Any) -> bool:
    """Whether lists and objects nest in ``value`` more than :data:`MAX_PARAMETER_DEPTH` levels
    (the store's bound), found without recursion (a body may nest them hundreds deep)."""
    return any(depth >= MAX_PARAMETER_DEPTH for _, depth, item in walk(value) if isinstance(item, (list, dict)))


def _params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A raw query's JSON parameters as the store takes them; one nested past
    :data:`MAX_PARAMETER_DEPTH` is refused, naming it, before :func:`_param` recurses into it."""
    for name, value in params.items():
        if _too_deep(value):
            raise InvalidInputError(
                f"params.{clipped(name, 200)}: lists and objects nest more than {MAX_PARAMETER_DEPTH} levels deep; "
                "give a value of at most that depth (strings, numbers, booleans, literals, or lists of them)"
            )
    return {k: _param(v) for k, v in params.items()}


def _param(value: Any) -> Any:
    """A JSON parameter value as the store takes it: an object with ``value`` (and a datatype or
    a language) is a literal."""
    if isinstance(value, list):
        return [_param(v) for v in value]
    if isinstance(value, dict) and "value" in value and set(value) <= {"value", "datatype", "lang"}:
        return LiteralTerm.model_validate(value).term()
    return value


def _cut(rows: list, limit: int | None) -> tuple[list, bool]:
    return (rows, False) if limit is None or len(rows) <= limit else (rows[:limit], True)


def _execute(store: Store, r: ExecuteRequest, timeout: float, limit: int | None) -> dict[str, Any]:
    result = store.execute(r.sexpr, timeout=timeout)
    answers, truncated = _cut(result.answers, limit)
    return {"answers": to_json(answers), "count": result.count, "truncated": truncated}


def _query(store: Store, r: QueryRequest, timeout: float, limit: int | None) -> dict[str, Any]:
    params = _params(r.params or {})
    # the store refuses writes and SERVICE, and reads no further than the bound needs
    result = store.query(r.text, params, timeout=timeout, limit=UNBOUNDED if limit is None else limit)
    return {"columns": result.columns, "rows": to_json(result.rows), "truncated": result.truncated}


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation(
            "relations", "distinct relations adjacent to each id or literal, with direction and edge count",
            RelationsRequest,
            lambda s, r, t, n: to_json(s.relations(_anchors(r.ids), r.direction, n, timeout=t)),
        ),
        Operation(
            "expand", "one hop from each id: edges (src, relation, dst, forward)", ExpandRequest,
            lambda s, r, t, n: to_json(s.expand(r.ids, r.relations, r.direction, n, timeout=t)),
        ),
        Operation(
            "follow_paths", "every walk from the seeds whose i-th edge carries path[i], as full path instances",
            FollowPathsRequest,
            lambda s, r, t, n: to_json(
                s.follow_paths(r.seeds, r.path, r.direction, n, distinct_edges=r.distinct_edges, timeout=t)
            ),
        ),
        Operation(
            "subgraph", "edges met by a breadth-first expansion of hops layers from the seeds, with each node's layer",
            SubgraphRequest,
            lambda s, r, t, n: to_json(s.subgraph(r.seeds, r.hops, r.direction, r.relations, n, timeout=t)),
        ),
        Operation(
            "shortest_paths", "all shortest undirected paths between each source and target, as relation sequences",
            ShortestPathsRequest,
            lambda s, r, t, n: to_json(s.shortest_paths(r.sources, r.targets, r.max_hops, n, exclude=r.exclude, timeout=t)),
        ),
        Operation(
            "two_hop_relations", "relations around the nodes reached from each id or literal through r1",
            TwoHopRelationsRequest,
            lambda s, r, t, n: to_json(s.two_hop_relations(_anchors(r.ids), r.r1, r.direction, n, timeout=t)),
        ),
        Operation(
            "names", "the display name of each id (null: not in the store)", IdsRequest,
            lambda s, r, t, n: {"names": s.names(r.ids, timeout=t), "truncated": False},
        ),
        Operation(
            "types", "the classes (type.object.type) of each id", IdsRequest,
            lambda s, r, t, n: {"types": s.types(r.ids, timeout=t), "truncated": False},
        ),
        Operation(
            "search", "entities by name: exact, prefix or contains", SearchRequest,
            lambda s, r, t, n: to_json(s.search(r.text, r.mode, n, timeout=t)),
            default_limit=10,
        ),
        Operation("execute", "the answers of an S-expression (GrailQA semantics), or its count", ExecuteRequest, _execute),
        Operation(
            "query", "a raw read-only query in the store's language (SPARQL or Cypher); writes are refused", QueryRequest,
            _query,
        ),
    )
}


def operation(name: str) -> Operation:
    """The operation ``name``; an unknown one is refused, naming the known ones."""
    found = OPERATIONS.get(name)
    if found is None:
        raise UnknownOperationError(f"unknown operation {clipped(name, 200)!r}: use one of {', '.join(OPERATIONS)}")
    return found


def run_operation(store: Store, name: str, body: Mapping[str, Any] | OperationRequest, bounds: Bounds,
                  expires: float | None = None) -> dict[str, Any]:
    """Run the operation ``name`` with the request ``body`` (JSON, or its parsed model) on
    ``store`` within ``bounds``; its result as JSON. ``expires``: the request's deadline, a
    :func:`time.monotonic` instant; the store gets only the time left until it (none left: 504
    without asking the store)."""
    op = operation(name)
    request = op.parse(body)
    timeout = bounded_timeout(request.timeout, bounds.timeout)
    if expires is not None:
        left = expires - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError(f"{name}: the request's deadline passed before the store was asked: "
                                        "give a larger timeout, or ask again when the server is less busy")
        timeout = min(timeout, left)
    limit = bounded_limit(request.limit, bounds.max_rows, op.default_limit) if isinstance(request, BoundedRequest) else None
    return op.call(store, request, timeout, limit)
