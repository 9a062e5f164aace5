"""The EtD exploration layer (Eq. 1–2 of the paper), written as message passing with torch's
own index operations.

For edges ``(s, r, o)`` leaving the current frontier, on question ``q``:

- attention (Eq. 1): ``α = sigmoid(w_s·h_s + w_r·h_r + w_q·h_q + w_qr·(h_r ⊙ h_q))``;
- pruning: each head ``s`` keeps its ``top_k`` edges by α (ties: the earlier edge first);
- propagation (Eq. 2): ``h_o = ReLU(Σ_{kept (s, r, o)} α · W (h_s ⊙ h_r))``, a scatter-add
  (``index_add_``) over the destination.

Destinations arrive as arbitrary int64 keys (a question's node); the layer's output nodes are
the distinct kept destinations, sorted — the next frontier.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class LayerOutput:
    """The next frontier and the kept edges (``src`` indexes the input nodes, ``dst`` the output)."""

    h: Tensor
    nodes: Tensor
    src: Tensor
    rel: Tensor
    dst: Tensor
    alpha: Tensor


def top_k_per_head(alpha: Tensor, src: Tensor, num_src: int, k: int) -> Tensor:
    """Indices (ascending) of the edges each head keeps: its ``k`` largest α, earlier edge first on ties."""
    order = torch.argsort(alpha, descending=True, stable=True)
    order = order[torch.argsort(src[order], stable=True)]
    counts = torch.bincount(src, minlength=num_src)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(src.numel(), device=src.device) - starts[src[order]]
    return torch.sort(order[rank < k]).values


class EtDLayer(nn.Module):
    """One exploration step: sigmoid edge attention, per-head top-K pruning, gated propagation."""

    def __init__(self, dim: int, top_k: int) -> None:
        super().__init__()
        if dim < 1 or top_k < 1:
            raise ValueError(f"dim and top_k must be positive, got dim={dim}, top_k={top_k}")
        self.dim = dim
        self.top_k = top_k
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
        logit = (h @ w_s)[src] + (h_rel @ w_r)[rel] + (h_q @ w_q)[q] + per_question_relation[q, rel]
        return torch.sigmoid(logit)

    def message(self, h: Tensor, h_rel: Tensor, src: Tensor, rel: Tensor) -> Tensor:
        """W (h_s ⊙ h_r) per edge, computed once per distinct (head, relation) pair."""
        pair = src * h_rel.shape[0] + rel
        unique, inverse = torch.unique(pair, return_inverse=True)
        return self.lin(h[unique // h_rel.shape[0]] * h_rel[unique % h_rel.shape[0]])[inverse]

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
        src, rel, alpha = src[kept], rel[kept], alpha[kept]
        nodes, dst_index = torch.unique(dst[kept], return_inverse=True)
        weighted = alpha.unsqueeze(1) * self.message(h, h_rel, src, rel)
        return LayerOutput(self.aggregate(weighted, dst_index, nodes.numel()), nodes, src, rel, dst_index, alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dim}, top_k={self.top_k})"
