"""Path-RAG (FiDeLiS §2.1): candidate next steps of every beam, scored by Eq. 3.

    S(r, e) = s_r + s_e + α · lookahead(e),
    lookahead(e) = max_{r'' ∈ rels(e)} s_{r''} + max_{e'' ∈ nbrs(e)} s_{e''}   (0 when e has no edge)

where s_x is the cosine similarity of x's embedding to the embedding of the plan's keywords,
as the authors' code computes it over each tail's one-hop neighbourhood; α = 0.3 and the
top n = 30 candidates of each beam are kept, as in the code.

Store work per search step is two batched calls for all beams of all questions at once:
``expand`` of every tail (both directions), then ``expand`` of every candidate neighbour
(the lookahead). Both are bounded by a limit; a cut answer is reported as truncated.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.graph import Edge, Literal, Path, Term
from engine.identifiers import UNBOUNDED
from engine.methods.fidelis.config import ALPHA
from engine.methods.lockstep import ExpandOf, Program, run
from engine.store import Store



def eq3_scores(
    query: torch.Tensor,
    relations: torch.Tensor,
    entities: torch.Tensor,
    candidates: torch.Tensor,
    lookahead: torch.Tensor,
    alpha: float = ALPHA,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 3 for every candidate at once.

    ``query`` (d), ``relations`` (R, d), ``entities`` (E, d): embeddings (any length; cosine
    is taken). ``candidates`` (C, 2): rows (relation index, entity index) of the steps to
    score. ``lookahead`` (L, 3): rows (entity index, relation index, neighbour entity index),
    the one-hop edges of candidate entities. Returns (S, s_r, s_e, lookahead) per candidate.
    """
    q = torch.nn.functional.normalize(query.float().reshape(1, -1), dim=1)
    s_rel = (torch.nn.functional.normalize(relations.float(), dim=1) @ q.T).reshape(-1)
    s_ent = (torch.nn.functional.normalize(entities.float(), dim=1) @ q.T).reshape(-1)
    n = entities.shape[0]
    look = torch.zeros(n, dtype=s_ent.dtype)
    if lookahead.numel():
        owner = lookahead[:, 0]
        best_rel = torch.full((n,), float("-inf")).scatter_reduce(0, owner, s_rel[lookahead[:, 1]], "amax")
        best_ent = torch.full((n,), float("-inf")).scatter_reduce(0, owner, s_ent[lookahead[:, 2]], "amax")
        has = torch.zeros(n, dtype=torch.bool)
        has[owner] = True
        look = torch.where(has, best_rel + best_ent, look)
    c_rel, c_ent = candidates[:, 0], candidates[:, 1]
    return s_rel[c_rel] + s_ent[c_ent] + alpha * look[c_ent], s_rel[c_rel], s_ent[c_ent], look[c_ent]


@dataclass(frozen=True)
class Candidate:
    """One next step: ``path`` is the beam's path extended by it."""

    beam: int
    path: Path
    score: float
    s_r: float
    s_e: float
    lookahead: float


@dataclass
class Neighbourhoods:
    """The edges met from each node by one batched ``expand``; ``truncated`` when its limit cut it."""

    edges: dict[Term, list[Edge]]
    truncated: bool

    @classmethod
    def fetch(cls, store: Store, nodes: Sequence[Term], limit: int | None) -> Neighbourhoods:
        """:meth:`fetching` served on ``store``."""
        return run(cls.fetching(nodes, limit), store)

    @classmethod
    def fetching(cls, nodes: Sequence[Term], limit: int | None) -> Program[Neighbourhoods]:
        """The neighbourhoods of ``nodes``, as a program (:mod:`engine.methods.lockstep`): one
        ``expand`` of every relation, both ways, for all of them."""
        ids = sorted({n for n in nodes if not isinstance(n, Literal)})  # literals are dead ends
        by_src: dict[Term, list[Edge]] = defaultdict(list)
        if not ids:
            return cls(by_src, False)
        edges, truncated = yield ExpandOf(tuple(ids), None, "both", UNBOUNDED if limit is None else limit)  # type: ignore[arg-type]
        for edge in edges:
            by_src[edge.src].append(edge)
        return cls(by_src, truncated)


def _extend(path: Path, edge: Edge) -> Path:
    return Path(path.nodes + (edge.dst,), path.relations + (edge.relation,), path.forward + (edge.forward,))


def next_steps(beam: Path, hood: Neighbourhoods) -> list[Path]:
    """Every one-step extension of ``beam`` from its tail; an extension never reuses an edge
    the path already walked (the store's walk semantics)."""
    used = {e.triple() for e in beam.edges()}
    return [_extend(beam, e) for e in hood.edges.get(beam.end, ()) if e.triple() not in used]


class Table:
    """Terms to dense indices, for one scoring call."""

    def __init__(self) -> None:
        self.index: dict[Term, int] = {}

    def __call__(self, term: Term) -> int:
        i = self.index.get(term)
        if i is None:
            i = self.index[term] = len(self.index)
        return i

    def terms(self) -> list[Term]:
        return list(self.index)


def score_steps(
    query: np.ndarray,
    steps: Sequence[Path],
    lookahead: Neighbourhoods,
    relation_vectors,
    entity_vectors,
    alpha: float = ALPHA,
) -> list[tuple[float, float, float, float]]:
    """(S, s_r, s_e, lookahead) of the last step of each path, by Eq. 3; the vectors come from
    ``relation_vectors(relations)`` and ``entity_vectors(terms)`` (row per item, in order)."""
    if not steps:
        return []
    rels, ents = Table(), Table()
    candidates = [(rels(p.relations[-1]), ents(p.end)) for p in steps]
    rows = []
    for owner in {p.end for p in steps}:
        for edge in lookahead.edges.get(owner, ()):
            rows.append((ents(owner), rels(edge.relation), ents(edge.dst)))
    S, s_r, s_e, look = eq3_scores(
        torch.from_numpy(np.asarray(query, dtype=np.float32)),
        torch.from_numpy(relation_vectors(rels.terms())),
        torch.from_numpy(entity_vectors(ents.terms())),
        torch.tensor(candidates, dtype=torch.long),
        torch.tensor(rows, dtype=torch.long).reshape(-1, 3),
        alpha,
    )
    return list(zip(S.tolist(), s_r.tolist(), s_e.tolist(), look.tolist()))
