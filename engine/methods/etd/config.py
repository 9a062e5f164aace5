"""EtD's options (light: the package lists it without importing torch)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.methods.spec import check_options, option


@dataclass(frozen=True)
class EtdConfig:
    """Every option of ``kgqa etd run``, with their defaults (listed on docs/methods/etd.md)."""

    checkpoint: str | None = option(None, "a best.pt written by `kgqa etd train` (required)")
    model: str | None = option(None, "language model for determination (default: the offline SmolLM2-135M-Instruct)")
    prompt_template: str | None = option(None, "chat (the tokenizer's, default), raw, llama2 or a string with {prompt}")
    gnn_only: bool = option(False, "answer with the GNN's top candidate (no LLM)")
    top_n: int = option(3, "reference answers in the prompt")
    batch_size: int = option(50, "questions explored together")
    max_degree: int | None = option(None, "per-node edge sample cap for hubs (default: the training run's)")
    encoding_cache: str | None = option(None, "directory keeping the frozen text encodings between runs")

    def __post_init__(self) -> None:
        check_options(self)
