"""The breadth-first layer loop, written once: the store's ``subgraph`` (one database call per
layer) and the reference store's ``subgraph`` and ``shortest_paths`` walk through it."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from engine.graph import Edge, Literal, Term


def breadth_first(
    seeds: Iterable[str], hops: int, layer: Callable[[list[str]], Iterable[Edge]]
) -> Iterator[tuple[int, Edge, bool]]:
    """``(depth, edge, first)`` for every edge met by ``hops`` layers of breadth-first
    expansion from ``seeds``: ``layer(frontier)`` gives the edges met in one hop from a
    layer's nodes, ``depth`` is the layer (1 for the seeds' own edges), ``first`` is True when
    the edge reaches its far node for the first time (so that node is at ``depth``). Literals
    are reached but never expanded. Stop iterating to stop the expansion."""
    depth: dict[Term, int] = dict.fromkeys(seeds, 0)
    frontier = list(depth)
    for current in range(1, hops + 1):
        if not frontier:
            return
        following: list[str] = []
        for edge in layer(frontier):
            first = edge.dst not in depth
            if first:
                depth[edge.dst] = current
                if not isinstance(edge.dst, Literal):
                    following.append(edge.dst)
            yield current, edge, first
        frontier = following
