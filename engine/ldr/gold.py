"""Gold relation chains as edge labels. The chains themselves are
:func:`loaders.questions.gold_hops`."""
from __future__ import annotations


def hop_label(relation: str, forward: bool) -> str:
    """A hop as an edge label: the relation, ``^relation`` against the stored direction."""
    return relation if forward else "^" + relation
