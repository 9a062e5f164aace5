"""EtD's run options and training settings (light: the package lists them, and a recipe checks
its EtD stages, without importing torch)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import InvalidInputError
from engine.methods.spec import check_options, option
from loaders.datasets import SPLIT_SEED


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


#: (L, K) per dataset: the paper's Table 8; PathQuestion is not in the paper [L = hops, K as MetaQA]
PAPER_LAYERS_TOP_K: dict[str, tuple[int, int]] = {
    "metaqa-1hop": (1, 40),
    "metaqa-2hop": (2, 60),
    "metaqa-3hop": (3, 100),
    "webqsp": (2, 200),
    "cwq": (4, 200),
    "pathquestion-2h": (2, 60),
    "pathquestion-3h": (3, 100),
}


def paper_layers_top_k(name: str, fix: str = "use one of") -> tuple[int, int]:
    """The paper's (L, K) for ``name``; one it lacks is refused, with ``fix`` saying how to
    name one it has (the caller's option or recipe key) before the list of them."""
    if name not in PAPER_LAYERS_TOP_K:
        raise InvalidInputError(f"no EtD paper settings (L, K) for {name!r}: {fix} {', '.join(PAPER_LAYERS_TOP_K)}")
    return PAPER_LAYERS_TOP_K[name]


@dataclass
class TrainConfig:
    """Training settings; the defaults are the paper's (d = 256, Adam lr 1e-4, wd 1e-3, batch 20)."""

    dataset: str
    num_layers: int
    top_k: int
    dim: int = 256
    lr: float = 1e-4
    weight_decay: float = 1e-3
    batch_size: int = 20
    epochs: int = 30
    patience: int = 3
    max_degree: int | None = 1000
    #: per-question cap on each layer's kept nodes in training steps [inf]; None = the paper
    max_frontier: int | None = None
    encoder: str | None = None
    seed: int = 0  # initialisation and batch order
    split_seed: int = SPLIT_SEED  # the train/val/test split
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    max_train: int | None = None
    #: directory keeping the frozen question/relation encodings between runs (None: no cache)
    encoding_cache: str | None = None
    #: start no new epoch once this many seconds have passed since training began (None: no limit)
    time_budget: float | None = None
    #: a checkpoint whose weights the model starts from (same L, K, d, encoder, relations)
    init_from: str | None = None
    #: encode questions with their topic entities' mentions replaced by a placeholder [inf]
    mask_topic: bool = False

    def __post_init__(self) -> None:
        # written so that NaN fails each check: every comparison with NaN is false
        counts = {"layers": self.num_layers, "top_k": self.top_k, "dim": self.dim, "batch size": self.batch_size,
                  "epochs": self.epochs, "patience": self.patience}
        optional = {"max_degree": self.max_degree, "max_frontier": self.max_frontier, "max_train": self.max_train}
        problems = [
            *((not (isinstance(v, int) and v >= 1), f"{name} must be an integer of at least 1") for name, v in counts.items()),
            *((v is not None and not (isinstance(v, int) and v >= 1), f"{name} must be an integer of at least 1 (or none)")
              for name, v in optional.items()),
            (not 0 <= self.lr < math.inf, "lr must be a number, not negative"),
            (not 0 <= self.weight_decay < math.inf, "weight decay must be a number, not negative"),
            (not (0 < self.val_fraction < 1 and 0 <= self.test_fraction < 1 and self.val_fraction + self.test_fraction < 1),
             "the validation and test fractions are shares of the questions, above 0 and below 1 together"),
            (self.time_budget is not None and not 0 <= self.time_budget < math.inf,
             "the time budget must be seconds, not negative (0: one epoch)"),
        ]
        for bad, message in problems:
            if bad:
                raise InvalidInputError(f"EtD training settings: {message}")

    @classmethod
    def for_dataset(cls, dataset: str, **overrides) -> TrainConfig:
        layers, top_k = paper_layers_top_k(dataset)
        settings = {"num_layers": layers, "top_k": top_k}
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return cls(dataset=dataset, **settings)
