"""Gold relation chains of questions that come with one: MetaQA's question types,
PathQuestion's annotated paths and the WebQSP slice's chains, as (relation, forward) hops
from the topic entity."""
from __future__ import annotations

from loaders.questions import Question, metaqa_relation_path

Hop = tuple[str, bool]  # relation, walked in the stored direction


def gold_chain(q: Question) -> list[Hop] | None:
    """The question's gold hops, or None when the dataset gives none."""
    if q.path:  # PathQuestion's paths run in the stored direction; the slice says per hop
        return list(zip(q.path, q.path_forward or [True] * len(q.path), strict=True))
    if q.qtype:
        return [(relation, direction == "out") for relation, direction in metaqa_relation_path(q.qtype)]
    return None


def hop_label(relation: str, forward: bool) -> str:
    """A hop as an edge label: the relation, ``^relation`` against the stored direction."""
    return relation if forward else "^" + relation
