"""The order of a form's answers: answers some walk of the form reaches without using one
stored edge twice come first, then those reached only by going back over an edge.

A form is a set, so its answers have no order of their own, and Hits@1 reads the first. A
chain form going out and back — ``(JOIN (R release_year) (JOIN written_by (JOIN (R written_by)
[Crawlspace])))``, the years of the films by Crawlspace's writers — also reaches Crawlspace's
own year, back over the edge it came by, which MetaQA's gold never counts unless another film
has it too. This is RoG's rule for its path ends
(:meth:`engine.methods.rog.grounding.Grounding.answers`), checked with one ``follow_paths``
call on the form's relations. Chosen on validation questions (``--split val``, with the ARG
full recipe's model): it raised MetaQA-3hop's Hits@1 and left the other MetaQA and PathQuestion
sets as they were.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.errors import KGQAError
from engine.graph import Path, Term
from engine.sexpr import parse
from engine.sexpr.tree import Entity, Join, Rel, Reverse
from engine.store import MAX_PATH_HOPS, Store

#: walks fetched to order one form's answers; more, and the answers keep their order
WALK_LIMIT = 10_000


def chain(sexpr: str | None) -> tuple[str, list[Rel]] | None:
    """``(anchor, hops)`` of a form that is a chain of JOINs from one entity, first hop first;
    None for any other form."""
    if sexpr is None:
        return None
    try:
        node = parse(sexpr)
    except KGQAError:
        return None
    hops: list[Rel] = []
    while isinstance(node, Join):
        hops.append(node.relation)
        node = node.arg
    if not isinstance(node, Entity):
        return None
    return node.id, hops[::-1]


def _follows(path: Path, hops: Sequence[Rel]) -> bool:
    """Whether a walk crosses each edge the way its hop does: ``(R r)`` from subject to object,
    ``r`` from object to subject (JOIN's reading); a self-loop either way (stores report it once)."""
    return all(
        forward == isinstance(hop, Reverse) or path.nodes[i] == path.nodes[i + 1]
        for i, (forward, hop) in enumerate(zip(path.forward, hops, strict=True))
    )


def _name(hop: Rel) -> str:
    return hop.relation.name if isinstance(hop, Reverse) else hop.name


def edge_distinct_first(store: Store, sexpr: str | None, answers: list[Term], timeout: float | None) -> list[Term]:
    """``answers`` of ``sexpr`` with those reached without reusing an edge first, each part in
    its order. Left as they are when the form is no chain of two or more hops, when its walks
    exceed :data:`WALK_LIMIT` or the call fails or times out: ordering must not cost an answer."""
    found = chain(sexpr)
    if found is None or len(answers) < 2 or not 2 <= len(found[1]) <= MAX_PATH_HOPS:
        return answers
    anchor, hops = found
    try:
        walks = store.follow_paths([anchor], [_name(h) for h in hops], "both", WALK_LIMIT, timeout=timeout)
    except KGQAError:
        return answers
    if walks.truncated:
        return answers
    reached = {p.end for p in walks.paths if _follows(p, hops)}
    return [a for a in answers if a in reached] + [a for a in answers if a not in reached]
