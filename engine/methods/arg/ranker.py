"""ARG-KBQA's two ranking stages.

Stage 1 (:class:`BiEncoder`): cosine between the question and each text, both embedded by a
sentence encoder (default: the offline all-MiniLM-L6-v2). Stage 2 (:class:`Scorer`): a
cross-encoder reading ``Question: {q}\\n{detail}`` whole and giving one scalar (a transformer
with a one-output linear head), trainable from a dataset's gold paths (:func:`train_scorer`),
saved to and loaded from a local directory. Untrained, stage 2 falls back to the bi-encoder's
cosine between the question and ``detail``.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import KGQAError
from engine.identifiers import positive_int
from engine.models.device import pick_device
from engine.models.encoders import default_encoder_path
from engine.models.run_folder import check_model_folder
from engine.outputs import folder_saved_whole, save_stopped, written_whole

SCORER_FILE = "arg-scorer.json"


def top(scores: Sequence[float], keep: int) -> list[int]:
    """Indexes of the ``keep`` best scores, best first (ties by index)."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:keep]


def stage2_text(question: str, detail: str) -> str:
    return f"Question: {question}\n{detail}"


class BiEncoder:
    """Stage 1: cosine similarity of sentence embeddings."""

    def __init__(self, name_or_path: str | None = None) -> None:
        from engine.models.encoders import load_encoder

        self.model = load_encoder(name_or_path)
        self._cache: dict[str, Any] = {}

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        import torch

        missing = [t for t in dict.fromkeys([query, *texts]) if t not in self._cache]
        if missing:
            vectors = self.model.encode(missing, convert_to_tensor=True, normalize_embeddings=True, batch_size=64)
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache.update(zip(missing, vectors))
        q = self._cache[query]
        matrix = torch.stack([self._cache[t] for t in texts])
        return (matrix @ q).tolist()


class Scorer:
    """Stage 2: a trained cross-encoder from ``path``, or the bi-encoder when ``path`` is None."""

    def __init__(self, fallback: BiEncoder, path: str | Path | None = None, device: str | None = None) -> None:
        self.fallback = fallback
        self.path = None if path is None else Path(path)
        self.model: Any = None
        if self.path is not None:
            from engine.models.encoders import load_sequence_classifier

            if not (self.path / SCORER_FILE).is_file():
                raise KGQAError(f"{self.path} holds no trained ARG scorer ({SCORER_FILE}); train one with kgqa arg train-ranker")
            self.device = pick_device(device)
            self.tokenizer, self.model = load_sequence_classifier(str(self.path), self.device)
            self.model.eval()

    @property
    def trained(self) -> bool:
        return self.model is not None

    def scores(self, question: str, details: Sequence[str]) -> list[float]:
        if not details:
            return []
        if self.model is None:
            return self.fallback.scores(question, details)
        import torch

        out: list[float] = []
        with torch.no_grad():
            for start in range(0, len(details), 64):
                texts = [stage2_text(question, d) for d in details[start:start + 64]]
                batch = self.tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt").to(self.device)
                out.extend(self.model(**batch).logits[:, 0].tolist())
        return out


@dataclass(frozen=True)
class Example:
    """One stage-2 training pair: the question, a detail text, and 1.0 (gold) or 0.0."""

    question: str
    detail: str
    label: float


@dataclass
class TrainReport:
    examples: int
    positives: int
    epochs: int
    final_loss: float
    seconds: float
    path: str


def check_scorer_folder(out_dir: str | Path, base: str | None = None) -> None:
    """Refuse, before any training, an ``out_dir`` the scorer cannot be saved to without
    destroying something (:func:`engine.models.run_folder.check_model_folder`): one holding
    anything but an earlier scorer is refused."""
    check_model_folder(out_dir, base or default_encoder_path(), run="ranker training",
                       ours=lambda folder: (folder / SCORER_FILE).is_file() or save_stopped(folder))


def train_scorer(
    examples: Sequence[Example],
    out_dir: str | Path,
    base: str | None = None,
    epochs: int = 1,
    batch_size: int = 16,
    learning_rate: float = 3e-5,
    seed: int = 0,
    device: str | None = None,
) -> TrainReport:
    """Fine-tune a cross-encoder (from ``base``, default the offline MiniLM's transformer) on
    ``examples`` with binary cross-entropy, and save it to ``out_dir``."""
    import torch

    from engine.models.encoders import load_sequence_classifier

    if not examples:
        raise KGQAError("no training examples: the dataset gave no gold paths")
    positive_int(epochs, "epochs")
    positive_int(batch_size, "batch_size")
    check_scorer_folder(out_dir, base)
    started = time.perf_counter()
    torch.manual_seed(seed)
    device = pick_device(device)
    source = base or default_encoder_path()
    tokenizer, model = load_sequence_classifier(source, device, num_labels=1)
    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    order = list(examples)
    rng = random.Random(seed)
    loss_value = 0.0
    for _ in range(epochs):
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            batch = tokenizer(
                [stage2_text(e.question, e.detail) for e in chunk], padding=True, truncation=True, max_length=128, return_tensors="pt"
            ).to(device)
            labels = torch.tensor([e.label for e in chunk], device=device)
            loss = loss_fn(model(**batch).logits[:, 0], labels)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            loss_value = float(loss.detach())
    out = Path(out_dir)
    with folder_saved_whole(out) as staging:
        model.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
        # saved: an earlier scorer's files are replaced next, and the folder is no scorer until its file is written again
        (out / SCORER_FILE).unlink(missing_ok=True)
    report = TrainReport(len(order), sum(e.label > 0.5 for e in order), epochs, round(loss_value, 4), round(time.perf_counter() - started, 1), str(out))
    with written_whole(out / SCORER_FILE) as partial:
        partial.write_text(json.dumps({"base": source, **report.__dict__}, indent=2))
    return report
