"""The EtD exploration layer (Eq. 1–2 of the paper), written as message passing with torch's
own index operations.

For edges ``(s, r, o)`` leaving the current frontier, on question ``q``:

- attention (Eq. 1): ``α = sigmoid(w_s·h_s + w_r·h_r + w_q·h_q + w_qr·(h_r ⊙ h_q))``;
- pruning: each head ``s`` keeps its ``top_k`` edges by α (ties: the earlier edge first);
- optional frontier cap [inf], in training mode only (``max_nodes``; None = the paper): when a
  question's kept tails number more than ``max_nodes``, only the ``max_nodes`` whose best kept
  in-edge has the largest α stay (ties: the smaller node key), and the edges into the others are
  pruned as well. It makes training steps cheaper; in eval mode (validation, prediction) the layer
  explores as the paper does;
- propagation (Eq. 2): ``h_o = ReLU(Σ_{kept (s, r, o)} α · W (h_s ⊙ h_r))``, a scatter-add
  (``index_add_``) over the destination.

Rows are gathered with :func:`rows` rather than ``x[index]``, so that training is the same from
run to run on a multi-threaded CPU.

Destinations arrive as arbitrary int64 keys (a question's node); the layer's output nodes are
the distinct kept destinations, sorted — the next frontier. Only they are expanded by the next
layer: a tail reached through pruned edges only is never expanded (the paper's C̃^ℓ).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from engine.identifiers import positive_int


@dataclass
class LayerOutput:
    """The next frontier and the kept edges (``src`` indexes the input nodes, ``dst`` the output)."""

    h: Tensor
    nodes: Tensor
    src: Tensor
    rel: Tensor
    dst: Tensor
    alpha: Tensor


def rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` along dimension 0. Its backward sums repeated indices with ``index_add_``,
    in a fixed order; the backward of ``x[index]`` adds them with atomic adds on a multi-threaded
    CPU, in whatever order the threads reach them, so gradients (and a trained model) would
    change from run to run."""
    return x.index_select(0, index)


def top_k_per_head(alpha: Tensor, src: Tensor, num_src: int, k: int) -> Tensor:
    """Indices (ascending) of the edges each head keeps: its ``k`` largest α, earlier edge first on ties."""
    order = torch.argsort(alpha, descending=True, stable=True)
    order = order[torch.argsort(src[order], stable=True)]
    counts = torch.bincount(src, minlength=num_src)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(src.numel(), device=src.device) - starts[src[order]]
    return torch.sort(order[rank < k]).values


def cap_nodes_per_group(score: Tensor, group: Tensor, num_groups: int, cap: int) -> Tensor:
    """Indices (ascending) of the nodes kept when each group keeps its ``cap`` largest scores;
    ties keep the earlier node (nodes arrive sorted by key, so the smaller key)."""
    return top_k_per_head(score, group, num_groups, cap)


class EtDLayer(nn.Module):
    """One exploration step: sigmoid edge attention, per-head top-K pruning (and, in training mode,
    optionally a per-question cap on the kept tails), gated propagation."""

    def __init__(self, dim: int, top_k: int, max_nodes: int | None = None) -> None:
        super().__init__()
        positive_int(dim, "dim")
        positive_int(top_k, "top_k")
        if max_nodes is not None:
            positive_int(max_nodes, "max_nodes")
        self.dim = dim
        self.top_k = top_k
        self.max_nodes = max_nodes
        #: rows w_s, w_r, w_q, w_qr of Eq. 1 (each 1×d)
        self.att = nn.Parameter(torch.empty(4, dim))
        #: W of Eq. 2
        self.lin = nn.Linear(dim, dim, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.att)
        self.lin.reset_parameters()

    def attention(self, h: Tensor, h_q: Tensor, h_rel: Tensor, node_question: Tensor, src: Tensor, rel: Tensor) -> Tensor:
        """α per edge (Eq. 1); ``node_question[s]`` is the question (row of ``h_q``) of head ``s``."""
        w_s, w_r, w_q, w_qr = self.att
        q = node_question[src]
        per_question_relation = (h_q * w_qr) @ h_rel.T  # w_qr·(h_r ⊙ h_q) for every (q, r)
        logit = (
            rows(h @ w_s, src) + rows(h_rel @ w_r, rel) + rows(h_q @ w_q, q)
            + rows(per_question_relation.reshape(-1), q * h_rel.shape[0] + rel)
        )
        return torch.sigmoid(logit)

    def message(self, h: Tensor, h_rel: Tensor, src: Tensor, rel: Tensor) -> Tensor:
        """W (h_s ⊙ h_r) per edge, computed once per distinct (head, relation) pair."""
        pair = src * h_rel.shape[0] + rel
        unique, inverse = torch.unique(pair, return_inverse=True)
        return rows(self.lin(rows(h, unique // h_rel.shape[0]) * rows(h_rel, unique % h_rel.shape[0])), inverse)

    def aggregate(self, weighted: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
        """Σ over each destination's kept edges, then ReLU."""
        out = torch.zeros(num_nodes, weighted.shape[1], dtype=weighted.dtype, device=weighted.device)
        return torch.relu(out.index_add_(0, dst, weighted))

    def forward(
        self, h: Tensor, h_q: Tensor, h_rel: Tensor, node_question: Tensor, src: Tensor, rel: Tensor, dst: Tensor
    ) -> LayerOutput:
        """``h`` [N, d] for the frontier, ``h_q`` [B, d], ``h_rel`` [R', d]; edges ``src`` (frontier
        index), ``rel`` (row of ``h_rel``), ``dst`` (int64 node keys)."""
        alpha = self.attention(h, h_q, h_rel, node_question, src, rel)
        kept = top_k_per_head(alpha, src, h.shape[0], self.top_k)
        src, rel, alpha, dst = src[kept], rel[kept], alpha[kept], dst[kept]
        nodes, dst_index = torch.unique(dst, return_inverse=True)
        if self.max_nodes is not None and self.training:
            src, rel, alpha, nodes, dst_index = self._cap(node_question, src, rel, alpha, nodes, dst_index, h_q.shape[0])
        weighted = alpha.unsqueeze(1) * self.message(h, h_rel, src, rel)
        return LayerOutput(self.aggregate(weighted, dst_index, nodes.numel()), nodes, src, rel, dst_index, alpha)

    def _cap(
        self, node_question: Tensor, src: Tensor, rel: Tensor, alpha: Tensor, nodes: Tensor, dst_index: Tensor, num_questions: int
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Keep at most ``max_nodes`` kept tails per question (by their best in-edge α) and the
        edges into them."""
        question = torch.zeros(nodes.numel(), dtype=torch.long, device=nodes.device)
        question[dst_index] = node_question[src]  # an edge belongs to its head's question
        counts = torch.bincount(question, minlength=num_questions)
        if int(counts.max()) <= self.max_nodes:
            return src, rel, alpha, nodes, dst_index
        best = torch.zeros(nodes.numel(), dtype=alpha.dtype, device=alpha.device)
        best = best.scatter_reduce(0, dst_index, alpha.detach(), reduce="amax", include_self=False)
        kept_nodes = cap_nodes_per_group(best, question, num_questions, self.max_nodes)
        remap = torch.full((nodes.numel(),), -1, dtype=torch.long, device=nodes.device)
        remap[kept_nodes] = torch.arange(kept_nodes.numel(), device=nodes.device)
        new_dst = remap[dst_index]
        keep = new_dst >= 0
        return src[keep], rel[keep], alpha[keep], nodes[kept_nodes], new_dst[keep]

    def __repr__(self) -> str:
        cap = "" if self.max_nodes is None else f", max_nodes={self.max_nodes}"
        return f"{type(self).__name__}({self.dim}, top_k={self.top_k}{cap})"
