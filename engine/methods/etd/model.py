"""The EtD exploration model: frozen text encodings, L exploration layers, MLP scorer (Eq. 3)
and the training loss (Eq. 4).

- Questions and relation names are encoded once by a frozen encoder (:func:`encode_texts`),
  rescaled to unit root-mean-square per vector (sentence encoders return unit-norm vectors whose
  entries are ~D^-1/2; products ``h_s ⊙ h_r`` of such values vanish after a layer or two) and
  projected by one learned ``W_L``; inverse relations get ``h_{-r} = W_{-r} h_r + b_{-r}``, the
  identity relation a learned embedding.
- ``h^0`` is ``h_q`` on each topic entity; each layer explores one hop through the store
  (:class:`~engine.methods.etd.exploration.Explorer`) and keeps each head's top-K edges; only the kept
  tails form the next frontier. ``max_frontier`` [inf] further caps each question's kept nodes
  per layer in training steps only (None, the default, is the paper; validation and
  prediction always explore uncapped).
- Candidates are every node kept by some layer; a candidate's representation is ``h^L`` (zero
  when the last layer did not reach it); ``p(q, e) = softmax_e MLP([h^L_e ; h_q])``.
- Loss with several gold answers: Eq. 4's ``−log p(q, a)`` averaged over the gold answers that
  exploration reached, then over the questions; a question whose gold answers were all pruned
  away contributes nothing (counted as ``unreached``).
"""
from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from engine.errors import KGQAError
from engine.methods.etd.exploration import KEY_STRIDE, Explorer
from engine.methods.etd.layers import EtDLayer, LayerOutput, rows
from engine.models.encoders import load_encoder
from engine.outputs import written_whole

CAUSAL_PREFIX = "causal:"


@dataclass(frozen=True)
class EtDConfig:
    """What a checkpoint needs to rebuild the model."""

    num_layers: int
    top_k: int
    dim: int
    encoder: str | None
    relations: tuple[str, ...]
    #: at most this many kept nodes per question per layer in training steps [inf]; None = the paper
    max_frontier: int | None = None
    #: encode questions with their topic entities' mentions replaced by a placeholder [inf]
    mask_topic: bool = False

    def to_json(self) -> dict:
        out = asdict(self)
        out["relations"] = list(self.relations)
        return out


def encode_texts(
    texts: Sequence[str], encoder: str | None = None, batch_size: int = 256, cache_dir: str | Path | None = None
) -> Tensor:
    """Frozen text encodings [n, D] on the CPU.

    ``encoder`` is a sentence-transformers model (None: the offline all-MiniLM-L6-v2) or
    ``causal:PATH``, a local causal LM whose last-layer token states are mean-pooled (the paper's
    choice, with Llama2-13B). With ``cache_dir``, the encodings are kept in a file named by a hash
    of the encoder and the texts, and read from it when the same texts are encoded again (the
    encoder is frozen, so they cannot change).
    """
    cached = None
    if cache_dir is not None:
        digest = hashlib.sha256("\x00".join([encoder or "", *texts]).encode()).hexdigest()[:32]
        cached = Path(cache_dir) / f"encodings-{digest}.pt"
        if cached.is_file():
            try:  # tensors only, never code; a file that does not read (cut short, foreign) is encoded again
                found = torch.load(cached, map_location="cpu", weights_only=True)
            except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError):
                found = None
            if isinstance(found, Tensor) and found.shape[:1] == (len(texts),):
                return found
    if encoder is not None and encoder.startswith(CAUSAL_PREFIX):
        out = _mean_pooled_causal_lm(texts, encoder[len(CAUSAL_PREFIX):], batch_size)
    else:
        model = load_encoder(encoder)
        with torch.no_grad():
            out = model.encode(list(texts), batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
        out = out.float().cpu().clone()  # a normal tensor (encode runs under inference_mode)
    if cached is not None:
        with written_whole(cached) as partial:
            torch.save(out, partial)
    return out


def _mean_pooled_causal_lm(texts: Sequence[str], path: str, batch_size: int) -> Tensor:
    from engine.models.loading import load_lm
    from engine.models.transformers_lm import TransformersLM

    loaded = load_lm(path)
    if not isinstance(loaded, TransformersLM):
        raise KGQAError(f"causal:{path} is not a local causal LM: encoding needs its hidden states")
    tokenizer, lm, device = loaded.tokenizer, loaded.model, loaded.device
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    chunks = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(list(texts[i : i + batch_size]), return_tensors="pt", padding=True).to(device)
            states = lm(**batch, output_hidden_states=True).hidden_states[-1]
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            chunks.append(((states * mask).sum(1) / mask.sum(1)).float().cpu())
    return torch.cat(chunks)


@dataclass
class Exploration:
    """What one forward pass found for a batch: candidates (grouped by question, as node keys),
    their log-probabilities, and every layer's frontier and kept edges (for the evidence)."""

    keys: Tensor
    log_prob: Tensor
    topics: Tensor
    layers: list[LayerOutput]

    @property
    def question(self) -> Tensor:
        return self.keys // KEY_STRIDE

    @property
    def node(self) -> Tensor:
        return self.keys % KEY_STRIDE

    def frontier(self, layer: int) -> Tensor:
        """The node keys that layer ``layer`` (1-based) expanded: the topics for layer 1."""
        return self.topics if layer == 1 else self.layers[layer - 2].nodes


def unit_rms(x: Tensor) -> Tensor:
    """Each row divided by its root-mean-square."""
    return x / x.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12)


def segment_log_softmax(logits: Tensor, segment: Tensor, num_segments: int) -> Tensor:
    """log-softmax of ``logits`` within each segment."""
    peak = torch.full((num_segments,), float("-inf"), dtype=logits.dtype, device=logits.device)
    peak = peak.scatter_reduce(0, segment, logits, reduce="amax").detach()
    shifted = logits - peak[segment]
    total = torch.zeros(num_segments, dtype=logits.dtype, device=logits.device).index_add_(0, segment, shifted.exp())
    return shifted - rows(total.log(), segment)


class EtDModel(nn.Module):
    """Question-conditioned exploration GNN over frozen question and relation encodings."""

    def __init__(self, config: EtDConfig, relation_features: Tensor) -> None:
        super().__init__()
        if relation_features.shape[0] != len(config.relations):
            raise ValueError(f"{relation_features.shape[0]} relation encodings for {len(config.relations)} relations")
        self.config = config
        dim = config.dim
        self.register_buffer("relation_features", relation_features.float())
        self.project = nn.Linear(relation_features.shape[1], dim)  # W_L
        self.inverse = nn.Linear(dim, dim)  # W_{-r}, b_{-r}
        self.identity = nn.Parameter(torch.empty(dim))
        self.layers = nn.ModuleList(EtDLayer(dim, config.top_k, config.max_frontier) for _ in range(config.num_layers))
        self.scorer = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.project.reset_parameters()
        self.inverse.reset_parameters()
        nn.init.normal_(self.identity, std=self.config.dim**-0.5)
        for layer in self.layers:
            layer.reset_parameters()
        for module in self.scorer:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def relation_embeddings(self) -> Tensor:
        """[2R + 1, d]: relations, their inverses, the identity."""
        h_r = self.project(unit_rms(self.relation_features))
        return torch.cat([h_r, self.inverse(h_r), self.identity.unsqueeze(0)])

    def forward(self, question_features: Tensor, topics: Sequence[Sequence[int]], explorer: Explorer) -> Exploration:
        """Explore from each question's topic nodes (``explorer`` node indices) and score candidates."""
        device = self.relation_features.device
        h_q = self.project(unit_rms(question_features.to(device)))
        h_rel = self.relation_embeddings()
        frontier = torch.unique(
            torch.tensor([q * KEY_STRIDE + n for q, nodes in enumerate(topics) for n in nodes], dtype=torch.long)
        ).to(device)
        topic_keys = frontier
        h = rows(h_q, frontier // KEY_STRIDE)
        outputs: list[LayerOutput] = []
        for layer in self.layers:
            edges = explorer.expand((frontier % KEY_STRIDE).tolist())
            src = edges.src.to(device)
            dst = (frontier[src] // KEY_STRIDE) * KEY_STRIDE + edges.dst.to(device)
            out = layer(h, h_q, h_rel, frontier // KEY_STRIDE, src, edges.rel.to(device), dst)
            outputs.append(out)
            h, frontier = out.h, out.nodes
        keys, inverse = torch.unique(torch.cat([o.nodes for o in outputs]), return_inverse=True)
        h_last = torch.zeros(keys.numel(), h.shape[1], dtype=h.dtype, device=device)
        h_last[inverse[inverse.numel() - frontier.numel():]] = h
        logits = self.scorer(torch.cat([h_last, rows(h_q, keys // KEY_STRIDE)], dim=1)).squeeze(1)
        return Exploration(keys, segment_log_softmax(logits, keys // KEY_STRIDE, len(topics)), topic_keys, outputs)


def gold_mask(exploration: Exploration, gold: Sequence[Sequence[int]]) -> Tensor:
    """True on the candidates that are a gold answer of their question."""
    keys = torch.tensor([q * KEY_STRIDE + n for q, nodes in enumerate(gold) for n in nodes], dtype=torch.long)
    return torch.isin(exploration.keys, keys.to(exploration.keys.device))


def answer_loss(exploration: Exploration, gold: Sequence[Sequence[int]]) -> tuple[Tensor, int]:
    """(Eq. 4 loss averaged over gold answers then questions, questions with no gold reached)."""
    mask = gold_mask(exploration, gold).to(exploration.log_prob.dtype)
    question = exploration.question
    num = len(gold)
    nll = torch.zeros(num, device=mask.device).index_add_(0, question, -exploration.log_prob * mask)
    count = torch.zeros(num, device=mask.device).index_add_(0, question, mask)
    reached = count > 0
    unreached = num - int(reached.sum())
    if not bool(reached.any()):
        return exploration.log_prob.sum() * 0.0, unreached
    return (nll[reached] / count[reached]).mean(), unreached


def ranked(exploration: Exploration, num_questions: int, top_n: int) -> list[list[tuple[int, int, float]]]:
    """Per question, its ``top_n`` candidates as (candidate index, node, probability), best first."""
    order = torch.argsort(exploration.log_prob.detach(), descending=True, stable=True)
    order = order[torch.argsort(exploration.question[order], stable=True)].cpu()
    question = exploration.question.cpu()[order].tolist()
    node = exploration.node.cpu()[order].tolist()
    prob = exploration.log_prob.detach().exp().cpu()[order].tolist()
    out: list[list[tuple[int, int, float]]] = [[] for _ in range(num_questions)]
    for index, q, n, p in zip(order.tolist(), question, node, prob):
        if len(out[q]) < top_n:
            out[q].append((index, n, p))
    return out
