"""Training the exploration model: Adam, batches of questions, validation Hits@1 with early
stopping, checkpoints, progress and a summary."""
from __future__ import annotations

import json
import pickle
import random
import re
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from engine.errors import InvalidInputError
from engine.methods.etd.config import TrainConfig
from engine.methods.etd.exploration import Explorer, RelationVocab, relation_text
from engine.methods.etd.model import (
    EtDConfig,
    EtDModel,
    Exploration,
    answer_loss,
    encode_texts,
    ranked,
)
from engine.methods.metrics import score_question
from engine.models.device import pick_device
from engine.methods.meter import Meter
from engine.outputs import written_whole
from engine.store import Store
from loaders.questions import Question

@dataclass
class TrainSummary:
    """What a training run did."""

    dataset: str
    device: str
    train_questions: int
    val_questions: int
    epochs: int
    best_epoch: int
    best_val_hits1: float
    #: the training pass of each epoch (validation not included), and its store time
    epoch_seconds: list[float] = field(default_factory=list)
    epoch_store_seconds: list[float] = field(default_factory=list)
    epoch_loss: list[float] = field(default_factory=list)
    val_hits1: list[float] = field(default_factory=list)
    unreached_train: float = 0.0
    encode_seconds: float = 0.0
    store_calls: int = 0
    peak_memory_mb: float = 0.0
    checkpoint: str = ""
    #: why training ended before ``epochs``: "patience", "time budget", or "" (ran every epoch)
    stopped_by: str = ""

    @property
    def store_share(self) -> float:
        total = sum(self.epoch_seconds)
        return sum(self.epoch_store_seconds) / total if total else 0.0

    def to_json(self) -> dict:
        out = asdict(self)
        out["store_share"] = round(self.store_share, 4)
        return out


def peak_memory_mb() -> float:
    """Peak resident memory of this process (and of the GPU when used), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if torch.cuda.is_available():
        peak += torch.cuda.max_memory_allocated() / 2**20
    return round(peak, 1)


def batches(items: Sequence[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def explore(
    model: EtDModel, explorer: Explorer, questions: Sequence[Question], features: torch.Tensor, members: Sequence[int]
) -> Exploration:
    """One forward pass over the questions ``members`` (indices into ``questions``/``features``)."""
    topics = [explorer.nodes(questions[i].topic_entities) for i in members]
    return model(features[list(members)], topics, explorer)


#: what a masked question says in place of its topic entity's mention
TOPIC_PLACEHOLDER = "X"


def question_texts(questions: Sequence[Question], mask_topic: bool = False) -> list[str]:
    """The texts the frozen encoder reads: the questions as written, or with every mention of a
    topic entity (case-insensitive, longest name first) replaced by ``TOPIC_PLACEHOLDER``, so that
    the words of a title ("Moving Out", "What's Eating Gilbert Grape") cannot pass for the relation
    asked about [inf]."""
    if not mask_topic:
        return [q.question for q in questions]
    out = []
    for q in questions:
        text = q.question
        for name in sorted(q.topic_entities, key=len, reverse=True):
            text = re.sub(re.escape(name), TOPIC_PLACEHOLDER, text, flags=re.IGNORECASE)
        out.append(text)
    return out


def gold_answers(question: Question) -> list[str]:
    """The gold answer ids and texts of a question, without repeats."""
    return list(dict.fromkeys([*question.answer_entities, *question.answers]))


def is_hit(explorer: Explorer, node: int | None, question: Question) -> bool:
    """Hits@1 (``engine.methods.metrics``) of one answer node against the question's gold answers."""
    return node is not None and score_question([str(explorer.terms[node])], gold_answers(question)).hits1 == 1.0


@torch.no_grad()
def evaluate_hits1(
    model: EtDModel, explorer: Explorer, questions: Sequence[Question], features: torch.Tensor, batch_size: int = 50
) -> float:
    """Hits@1 of the GNN's top candidate."""
    model.eval()
    hits = 0
    for members in batches(range(len(questions)), batch_size):
        top = ranked(explore(model, explorer, questions, features, members), len(members), 1)
        hits += sum(is_hit(explorer, t[0][1] if t else None, questions[i]) for i, t in zip(members, top))
    return hits / len(questions) if questions else 0.0


def build_model(config: TrainConfig, vocab: RelationVocab) -> EtDModel:
    relation_features = encode_texts([relation_text(r) for r in vocab.names], config.encoder, cache_dir=config.encoding_cache)
    model_config = EtDConfig(
        config.num_layers, config.top_k, config.dim, config.encoder, tuple(vocab.names), config.max_frontier,
        config.mask_topic,
    )
    return EtDModel(model_config, relation_features).to(pick_device())


def load_checkpoint(path: str | Path, device: str | None = None) -> tuple[EtDModel, dict]:
    """The model of a checkpoint file (on ``device``, default the chosen one) and the checkpoint's
    metadata. Tensors and plain values only are read (``weights_only``): a file is never run."""
    wrong = (f"{path} is not an EtD checkpoint: give the best.pt that `kgqa etd train` (or a recipe's EtD stage) "
             "writes")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise InvalidInputError(f"EtD checkpoint {path} does not exist: train one with "
                                "`kgqa etd train --checkpoint-dir DIR` (it writes DIR/best.pt)") from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as e:
        raise InvalidInputError(f"{wrong} (torch cannot read it as a file of tensors and plain values)") from e
    if not isinstance(saved, dict) or not {"model", "train", "state_dict"} <= set(saved):
        raise InvalidInputError(f"{wrong} (no model, train and state_dict in it)")
    try:
        config = EtDConfig(**{**saved["model"], "relations": tuple(saved["model"]["relations"])})
        model = EtDModel(config, saved["state_dict"]["relation_features"])
        model.load_state_dict(saved["state_dict"])
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:
        raise InvalidInputError(f"{wrong} (its model does not load: {str(e).splitlines()[0][:200]})") from e
    return model.to(pick_device(device)).eval(), saved


def _save(path: Path, model: EtDModel, config: TrainConfig, **extra) -> None:
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    with written_whole(path) as partial:  # an interruption leaves the earlier checkpoint whole
        torch.save({"model": model.config.to_json(), "train": asdict(config), "state_dict": state, **extra}, partial)


def train(
    store: Store,
    train_questions: Sequence[Question],
    val_questions: Sequence[Question],
    config: TrainConfig,
    checkpoint_dir: str | Path,
    *,
    progress: bool = True,
) -> TrainSummary:
    """Train on ``train_questions``, keep the best model by validation Hits@1 in
    ``checkpoint_dir/best.pt`` (and the latest in ``last.pt``), stop after ``patience`` epochs
    without improvement; ``summary.json`` records the run."""
    torch.manual_seed(config.seed)
    out_dir = Path(checkpoint_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = RelationVocab.from_store(store)
    meter = Meter()
    explorer = Explorer(meter.store(store), vocab, max_degree=config.max_degree)
    model = build_model(config, vocab)
    if config.init_from is not None:
        start, _ = load_checkpoint(config.init_from)
        if start.config != model.config:
            raise InvalidInputError(f"--init-from {config.init_from} was trained with {start.config}, not {model.config}: "
                                    "give the settings it was trained with")
        model.load_state_dict(start.state_dict())
    started = time.perf_counter()
    features = encode_texts(question_texts(train_questions, config.mask_topic), config.encoder, cache_dir=config.encoding_cache)
    val_features = encode_texts(question_texts(val_questions, config.mask_topic), config.encoder, cache_dir=config.encoding_cache)
    summary = TrainSummary(
        config.dataset, pick_device(), len(train_questions), len(val_questions), 0, 0, -1.0,
        encode_seconds=round(time.perf_counter() - started, 2),
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    order = list(range(len(train_questions)))
    shuffler = random.Random(config.seed)
    stale, best = 0, -1.0  # best unrounded: a later epoch with the same Hits@1 is not better
    training_started = time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        if config.time_budget is not None and epoch > 1 and time.perf_counter() - training_started > config.time_budget:
            summary.stopped_by = "time budget"
            break
        shuffler.shuffle(order)
        model.train()
        epoch_started, store_before = time.perf_counter(), meter.seconds["store"]
        total_loss, unreached, steps = 0.0, 0, 0
        bar = tqdm(list(batches(order, config.batch_size)), desc=f"epoch {epoch}", file=sys.stderr, disable=not progress)
        for members in bar:
            exploration = explore(model, explorer, train_questions, features, members)
            gold = [explorer.nodes(train_questions[i].answer_entities) for i in members]
            loss, missed = answer_loss(exploration, gold)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total_loss, unreached, steps = total_loss + float(loss.detach()), unreached + missed, steps + 1
            bar.set_postfix(loss=f"{total_loss / steps:.4f}")
        summary.epoch_seconds.append(round(time.perf_counter() - epoch_started, 2))
        summary.epoch_store_seconds.append(round(meter.seconds["store"] - store_before, 2))
        hits = evaluate_hits1(model, explorer, val_questions, val_features)
        summary.epochs = epoch
        summary.epoch_loss.append(round(total_loss / max(steps, 1), 5))
        summary.val_hits1.append(round(hits, 5))
        summary.unreached_train = round(unreached / max(len(train_questions), 1), 5)
        if train_questions and unreached == len(train_questions):
            hops = f"{config.num_layers} hop{'s' if config.num_layers != 1 else ''}"
            raise InvalidInputError(
                f"none of the {len(train_questions):,} training questions reaches a gold answer within {hops} of its "
                "topic entities in the store, so there is nothing to learn from: is the store this dataset's graph "
                "(and are its topic entities in it)? No checkpoint was written"
            )
        print(  # one line per epoch, with or without the progress bar
            f"epoch {epoch}: loss {summary.epoch_loss[-1]:.4f}  val Hits@1 {hits:.4f}  "
            f"{summary.epoch_seconds[-1]:.1f} s (store {summary.epoch_store_seconds[-1]:.1f} s)  "
            f"unreached {summary.unreached_train:.1%} of the training questions",
            file=sys.stderr,
        )
        _save(out_dir / "last.pt", model, config, epoch=epoch, val_hits1=hits)
        if hits > best:
            best, summary.best_val_hits1, summary.best_epoch, stale = hits, round(hits, 5), epoch, 0
            _save(out_dir / "best.pt", model, config, epoch=epoch, val_hits1=hits)
        else:
            stale += 1
            if stale >= config.patience:
                summary.stopped_by = "patience"
                break
    summary.store_calls = meter.calls["store"]
    summary.peak_memory_mb = peak_memory_mb()
    summary.checkpoint = str(out_dir / "best.pt")
    (out_dir / "summary.json").write_text(json.dumps(summary.to_json(), indent=2))
    return summary
