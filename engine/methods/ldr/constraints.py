"""Stage 2, discriminative pruning (LDR §2.2, §3.2, Eq. 8): constraint entities, the constraint
pool, the iterative choice, and pruning G_k at the level of first-hop subtrees.

A constraint is (position, operator, target): a node of S_k other than the start node, one of
``= < <= > >= min max``, and a constraint entity (``min``/``max`` take none). The pool holds
the *meaningful* combinations of the paper's positions × operators × constraint entities:
- an entity target: ``=`` on entity and topic nodes;
- a value written in the question (a number, a year, a date): ``= < <= > >=`` on num and
  date nodes where the value reads as that kind, ``=`` on entity nodes (string values);
- ``min`` and ``max`` on every num and date node.
Each constraint entity is matched once (choosing it removes its other options), as is each
node's ``min``/``max``. The model chooses until ``No constrain`` (before any) or the end of
its answer (after some: the chosen ones joined by ``, ``), or until the pool is empty.

Comparisons use the typed-literal keys of :mod:`engine.sexpr.keys` (``execute``'s semantics):
numbers by value, dates and times by instant (``2011`` is 2011-01-01); a value of another
kind satisfies nothing. ``=`` with an entity target compares ids; with a value on an entity node, the
value's text with the member's (a string literal's value, or an id: MetaQA's ids are names),
case-insensitively.

Pruning (after the choice, the paper's KITT example): for a constraint on node n, take the
first-hop node f above n (the node under the start node on the way to n, n itself when n
is first-hop). Each member of f roots a subtree of G_k; the subtrees whose members at n
satisfy the constraint (some member does; for ``min``/``max``, some member holds the extreme
over all kept subtrees) stay, the others are pruned from the root. Constraints apply in the
order chosen; subtrees of other first-hop nodes are untouched.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from engine.graph import XSD, Literal, Term
from engine.methods.lockstep import Decide, Program
from engine.methods.ldr.prompts import NO_CONSTRAINT, constraint_prompt
from engine.methods.ldr.search import Step, top_scores
from engine.methods.ldr.structure import DATE, ENTITY, NUM, TOPIC, Subgraph, term_text
from engine.sexpr import keys
from engine.sexpr.tree import literal_kind

OPERATORS = ("=", "<", "<=", ">", ">=", "min", "max")
_COMPARE = {
    "=": lambda a, b: a == b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_KIND = {NUM: "number", DATE: "time"}
_DATES = ((re.compile(r"-?\d{4}"), "gYear"), (re.compile(r"-?\d{4}-\d{2}"), "gYearMonth"), (re.compile(r"-?\d{4}-\d{2}-\d{2}"), "date"))
# a date, else a number, standing alone in the question text
_VALUE = re.compile(r"(?<![\w.\-])(\d{4}-\d{2}-\d{2}|\d+(?:\.\d+)?)(?![\w\-]|\.\d)")
_BRACKETS = re.compile(r"\[[^\]]*\]")


@dataclass(frozen=True)
class Target:
    """A constraint entity: an entity id shown by ``text`` (its name), or a value written in
    the question (a plain :class:`Literal` of its text)."""

    term: Term
    text: str


@dataclass(frozen=True)
class Constraint:
    node: int
    op: str
    target: Target | None = None

    def text(self, graph: Subgraph) -> str:
        name = graph.nodes[self.node].name
        return f"{name} {self.op}" if self.target is None else f"{name}{self.op} {self.target.text}"


def question_values(question: str, topics: Sequence[str] = ()) -> list[Target]:
    """The numbers and dates written in the question, outside ``[topic]`` brackets and topic names."""
    text = _BRACKETS.sub(" ", question)
    for topic in topics:
        text = text.replace(topic, " ")
    values = dict.fromkeys(m.group(1) for m in _VALUE.finditer(text))
    return [Target(Literal.make(v), v) for v in values]


def value_key(text: str, kind: str) -> float | None:
    """The comparison key of a question's value read as a ``number`` or ``time``, else None."""
    if kind == "number":
        try:
            return float(text)
        except ValueError:
            return None
    for pattern, datatype in _DATES:
        if pattern.fullmatch(text):
            return keys.key(Literal.make(text, XSD + datatype))
    return None


def _term_key(term: Term, kind: str) -> float | None:
    if isinstance(term, Literal) and literal_kind(term) == kind:
        return keys.key(term)
    return None


def constraint_pool(graph: Subgraph, targets: Sequence[Target]) -> list[Constraint]:
    """Every meaningful (position, operator, target) of S_k (see the module doc), in node order."""
    pool: list[Constraint] = []
    for node in graph.nodes[1:]:
        kind = _KIND.get(node.type)
        for target in targets:
            if not isinstance(target.term, Literal):
                if node.type in (ENTITY, TOPIC):
                    pool.append(Constraint(node.index, "=", target))
            elif kind is not None:
                if value_key(target.text, kind) is not None:
                    pool.extend(Constraint(node.index, op, target) for op in _COMPARE)
            elif node.type == ENTITY:
                pool.append(Constraint(node.index, "=", target))
        if kind is not None:
            pool.extend(Constraint(node.index, op) for op in ("min", "max"))
    return pool


def satisfies(term: Term, node_type: str, constraint: Constraint) -> bool:
    """Whether one member at the constraint's position satisfies a comparison constraint."""
    target = constraint.target
    assert target is not None, "min and max are not member tests"
    kind = _KIND.get(node_type)
    if isinstance(target.term, Literal) and kind is not None:
        a, b = _term_key(term, kind), value_key(target.text, kind)
        return a is not None and b is not None and _COMPARE[constraint.op](a, b)
    if constraint.op != "=":
        return False
    if isinstance(target.term, Literal):
        return term_text(term).casefold() == target.text.casefold()
    return term == target.term


def prune(graph: Subgraph, constraints: Sequence[Constraint]) -> set[int]:
    """The members the constraints prune from G_k (whole first-hop subtrees)."""
    hops = graph.first_hops()
    pruned: set[int] = set()  # first-hop members whose subtrees are gone
    for c in constraints:
        position = graph.nodes[c.node]
        roots = [u for u in graph.nodes[graph.first_hop_node(c.node)].members if u not in pruned]  # type: ignore[index]
        values: dict[int, list[Term]] = {r: [] for r in roots}
        for u in position.members:
            root = hops[u]
            if root in values:
                values[root].append(graph.members[u].term)  # type: ignore[index]
        if c.op in ("min", "max"):
            kind = _KIND[position.type]
            found = {r: [k for v in vs if (k := _term_key(v, kind)) is not None] for r, vs in values.items()}
            every = [k for ks in found.values() for k in ks]
            best = (max if c.op == "max" else min)(every) if every else None
            keep = {r for r, ks in found.items() if best is not None and best in ks}
        else:
            keep = {r for r, vs in values.items() if any(satisfies(v, position.type, c) for v in vs)}
        pruned.update(r for r in roots if r not in keep)
    return {u for u, root in enumerate(hops) if root in pruned}


@dataclass
class ConstraintResult:
    chosen: list[Constraint]
    steps: list[Step]


def _same_slot(a: Constraint, b: Constraint) -> bool:
    """Two options that match the same constraint entity (or the same node's min/max)."""
    if a.target is None or b.target is None:
        return a.target is None and b.target is None and a.node == b.node
    return a.target == b.target


def locate_constraints(question: str, graph: Subgraph, targets: Sequence[Target]) -> Program[ConstraintResult]:
    """Choose constraints one at a time (Eq. 8): each option is the whole answer so far (a
    program, :mod:`engine.methods.lockstep`)."""
    pool = constraint_pool(graph, targets)
    prompt = constraint_prompt(question, graph.render(), [t.text for t in targets])
    chosen: list[Constraint] = []
    steps: list[Step] = []
    while pool:
        done = [c.text(graph) for c in chosen]
        texts = [", ".join([*done, c.text(graph)]) for c in pool] + [", ".join(done) if done else NO_CONSTRAINT]
        choice = yield Decide(prompt, tuple(texts))
        steps.append(Step(len(texts), texts[choice.index], top_scores(texts, choice)))
        if choice.index == len(pool):
            break
        picked = pool[choice.index]
        chosen.append(picked)
        pool = [c for c in pool if not _same_slot(c, picked)]
    return ConstraintResult(chosen, steps)
