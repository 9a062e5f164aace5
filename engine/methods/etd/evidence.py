"""Evidence paths (Algorithm 2): greedy backtracking from a candidate to the topic entity.

From the last layer that kept the candidate down to layer 1, take the kept in-edge with the
largest α (the earlier edge on ties) and step to its head. Facts are written in the KG's
original direction (an inverse hop ``o ←r— s`` becomes ``(o, r, s)``); identity hops are dropped.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.methods.etd.exploration import KEY_STRIDE, Explorer
from engine.methods.etd.model import Exploration
from engine.graph import Term


@dataclass(frozen=True)
class Fact:
    """A stored triple, as the prompt shows it."""

    subject: Term
    relation: str
    object: Term


def backtrack(exploration: Exploration, key: int) -> list[tuple[int, int, int]]:
    """The hops (head node, relation id, tail node) from the topic to candidate ``key``, in order."""
    hops: list[tuple[int, int, int]] = []
    layer = len(exploration.layers)
    while layer > 0:
        nodes = exploration.layers[layer - 1].nodes
        at = int(torch.searchsorted(nodes, torch.tensor(key, device=nodes.device)))
        if at < nodes.numel() and int(nodes[at]) == key:
            break
        layer -= 1
    if layer == 0:
        return hops
    index = at
    for step in range(layer, 0, -1):
        out = exploration.layers[step - 1]
        incoming = torch.nonzero(out.dst == index).squeeze(1)
        best = incoming[torch.argmax(out.alpha[incoming])]
        index = int(out.src[best])
        head = int(exploration.frontier(step)[index])
        hops.append((head % KEY_STRIDE, int(out.rel[best]), key % KEY_STRIDE))
        key = head
    return hops[::-1]


def facts(hops: list[tuple[int, int, int]], explorer: Explorer) -> list[Fact]:
    """The hops as stored triples, identity hops dropped."""
    out: list[Fact] = []
    for head, rel, tail in hops:
        name, forward = explorer.vocab.describe(rel)
        if name is None:
            continue
        s, o = (head, tail) if forward else (tail, head)
        out.append(Fact(explorer.terms[s], name, explorer.terms[o]))
    return out
