"""Stage 1, discriminative search (LDR §3.1, Eq. 6–7): the option pool built in the store and
the greedy loop that grows G_k and S_k one chosen option at a time.

An option is (node, relation, direction): expand every entity grouped in the node by the
relation, in the stored direction (``forward``) or against it. Its text is the paper's
``entity+relation``, the node's name, ``+``, and the relation, written ``^relation`` when it
is walked against the stored direction (SPARQL's inverse-path mark). ``None`` is always the
last option and ends the search.

Store work per step: the chosen option runs as ONE ``expand`` call over every entity of its
node, and the new node's options come from ONE ``relations`` call over its entities (the
start node's from one more call before the first step). An option is *feasible*, and so in
the pool, when some member of its node has an edge of that relation and direction other
than the edge it was reached by: G_k stays a tree and a walk never goes back over the edge
it came along. A self-loop belongs to the ``forward`` option, as in the store's walks.
``type.object.name`` is never an option (names are shown, not walked).

Pool bookkeeping as the paper: the chosen option leaves the pool, the new node's options
join it, every node of S_k stays open for branching. Limits, each reported in
``truncated`` when hit, never a silent cut: ``max_steps`` options executed; ``max_options``
in the pool (options past it, last-added first, are dropped); ``relation_rows`` and
``edges`` per store call (hubs).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from engine.errors import InvalidInputError
from engine.graph import NAME_RELATION, Edge, Literal
from engine.methods.lockstep import (
    Choice,
    Chooser,
    Decide,
    ExpandOf,
    Program,
    RelationsOf,
    decider,
    serve,
)
from engine.methods.ldr.prompts import NONE, search_prompt
from engine.methods.ldr.structure import Child, Member, Subgraph
from engine.results import RelationCount
from engine.store import Store


@dataclass(frozen=True)
class Option:
    node: int
    relation: str
    forward: bool

    def text(self, graph: Subgraph) -> str:
        return f"{graph.nodes[self.node].name}+{'' if self.forward else '^'}{self.relation}"


@dataclass(frozen=True)
class SearchLimits:
    max_steps: int = 8
    max_options: int = 256
    relation_rows: int | None = 100_000
    edges: int | None = 20_000

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_options", "relation_rows", "edges"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidInputError(f"LDR search limit {name} must be at least 1, not {value}")


@dataclass
class Step:
    """One decision: the pool's size (None included), the option chosen, its best scores."""

    options: int
    chosen: str
    top: list[tuple[str, float]] | None = None
    size: int | None = None  # members of the node it made

    def to_json(self) -> dict:
        out: dict = {"options": self.options, "chosen": self.chosen}
        if self.top is not None:
            out["top"] = [[t, round(s, 4)] for t, s in self.top]
        if self.size is not None:
            out["size"] = self.size
        return out


@dataclass
class SearchResult:
    graph: Subgraph
    steps: list[Step] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)  # which limits were hit: steps, pool, relations, expand


def top_scores(texts: Sequence[str], choice: Choice, k: int = 3) -> list[tuple[str, float]] | None:
    if choice.scores is None:
        return None
    ranked = sorted(range(len(texts)), key=lambda i: -choice.scores[i])[:k]  # type: ignore[index]
    return [(texts[i], choice.scores[i]) for i in ranked]  # type: ignore[index]


def _back(member: Member) -> tuple[str, str] | None:
    """(relation, direction) in which a member meets the edge it was reached by."""
    edge = member.edge
    if edge is None:
        return None
    out = edge.subject == edge.object or edge.subject == member.term
    return edge.relation, "out" if out else "in"


def feasible_options(graph: Subgraph, node: int, rows: Iterable[RelationCount]) -> list[Option]:
    """The options of ``node`` given the ``relations`` rows of its entities (see the module doc)."""
    counts: dict[object, list[tuple[str, str, int]]] = defaultdict(list)
    for row in rows:
        if row.relation != NAME_RELATION:
            counts[row.id].append((row.relation, row.direction, row.count))
    found: set[tuple[str, str]] = set()
    for uid in graph.nodes[node].members:
        member = graph.members[uid]
        back = _back(member)
        for relation, direction, count in counts.get(member.term, ()):
            if count - ((relation, direction) == back) > 0:
                found.add((relation, direction))
    return [Option(node, r, d == "out") for r, d in sorted(found, key=lambda rd: (rd[0], rd[1] != "out"))]


def children(graph: Subgraph, option: Option, edges: Iterable[Edge]) -> list[Child]:
    """The members ``expand``'s edges add below the option's node: per member (in order), its
    edges (in store order) except the one it was reached by and, walked backwards, self-loops."""
    by_src: dict[object, list[Edge]] = defaultdict(list)
    for e in edges:
        if e.relation == option.relation and e.forward == option.forward and (e.forward or e.src != e.dst):
            by_src[e.src].append(e)
    out = []
    for uid in graph.nodes[option.node].members:
        member = graph.members[uid]
        for e in by_src.get(member.term, ()):
            triple = e.triple()
            if triple != member.edge:
                out.append(Child(uid, e.dst, triple))
    return out


class Search:
    """Stage 1 with one set of limits: :meth:`steps` is the program (:mod:`engine.methods.lockstep`),
    :meth:`run` serves it alone."""

    def __init__(self, limits: SearchLimits = SearchLimits()) -> None:
        self.limits = limits

    def run(self, store: Store, choose: Chooser, question: str, graph: Subgraph) -> SearchResult:
        return serve([self.steps(question, graph)], store, decider(choose))[0]

    def _relations(self, ids: list[str], truncated: list[str]) -> Program[list[RelationCount]]:
        if not ids:
            return []
        rows, cut = yield RelationsOf(tuple(ids), self.limits.relation_rows)
        if cut:
            _flag(truncated, "relations")
        return rows

    def _grow(self, pool: list[Option], new: list[Option], truncated: list[str]) -> None:
        room = self.limits.max_options - len(pool)
        if len(new) > room:
            _flag(truncated, "pool")
        pool.extend(new[: max(room, 0)])

    def steps(self, question: str, graph: Subgraph) -> Program[SearchResult]:
        result = SearchResult(graph)
        pool: list[Option] = []
        rows = yield from self._relations(graph.ids(0), result.truncated)
        self._grow(pool, feasible_options(graph, 0, rows), result.truncated)
        while pool:
            if len(result.steps) == self.limits.max_steps:
                _flag(result.truncated, "steps")
                break
            texts = [o.text(graph) for o in pool] + [NONE]
            choice = yield Decide(search_prompt(question, graph.render()), tuple(texts))
            step = Step(len(texts), texts[choice.index], top_scores(texts, choice))
            result.steps.append(step)
            if choice.index == len(pool):
                break
            option = pool.pop(choice.index)
            edges, cut = yield ExpandOf(
                tuple(graph.ids(option.node)), (option.relation,), "out" if option.forward else "in", self.limits.edges
            )
            if cut:
                _flag(result.truncated, "expand")
            found = children(graph, option, edges)
            ids = list(dict.fromkeys(c.term for c in found if not isinstance(c.term, Literal)))
            rows = yield from self._relations(ids, result.truncated)  # type: ignore[arg-type]
            named = {r.id for r in rows if r.relation == NAME_RELATION and r.direction == "out"}
            node = graph.add_node(option.node, option.relation, option.forward, found, named)  # type: ignore[arg-type]
            step.size = len(node.members)
            self._grow(pool, feasible_options(graph, node.index, rows), result.truncated)
        return result


def _flag(truncated: list[str], reason: str) -> None:
    if reason not in truncated:
        truncated.append(reason)
