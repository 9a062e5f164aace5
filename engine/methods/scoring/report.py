"""Every convention over prediction records, per set, hop count and question type, with
percentile-bootstrap intervals: :func:`score` and its :class:`Report`."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import InvalidInputError
from engine.methods.metrics import check_bootstrap, check_modes, checked_records, normalize, score_record
from engine.methods.scoring.conventions import gnn_rag_hit1, rog_hit, tog_em, webqsp_f1

#: every metric a group reports, in the order of the JSON and the tables
METRICS = ("hits1", "hits1_any", "rog_hit", "gnn_rag_hit1", "tog_em", "webqsp_f1", "macro_f1", "answer_f1", "precision", "recall")
LABELS = {
    "hits1": "Hits@1", "hits1_any": "Hits@1-any", "rog_hit": "RoG Hit", "gnn_rag_hit1": "GNN-RAG Hit1", "tog_em": "ToG EM",
    "webqsp_f1": "WebQSP F1", "macro_f1": "macro-F1", "answer_f1": "answer F1", "precision": "P", "recall": "R",
}
#: the per-question values that metrics are means of (``f1`` → ``macro_f1``; ``answer_f1`` is
#: the harmonic mean of the mean precision and the mean recall)
_COLUMNS = ("hits1", "hits1_any", "rog_hit", "gnn_rag_hit1", "tog_em", "webqsp_f1", "f1", "precision", "recall")
CONFIDENCE = 0.95
_CHUNK = 64  # resamples drawn at once: bounds memory to a few 64 × questions arrays


@dataclass(frozen=True)
class Estimate:
    """A metric's value and its bootstrap interval (None without resamples or questions)."""

    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class GroupScores:
    """The questions of one group that have gold answers, those that have none (counted, not
    scored), and every metric of :data:`METRICS`."""

    questions: int
    no_gold: int
    metrics: dict[str, Estimate]


@dataclass(frozen=True)
class SetScores:
    overall: GroupScores
    hops: dict[str, GroupScores]
    qtype: dict[str, GroupScores]


@dataclass(frozen=True)
class Report:
    """Scores per set (a record's ``set`` or ``dataset``), each overall and per hop count and
    question type, with the settings that produced them."""

    sets: dict[str, SetScores]
    match: str = "exact"
    by: str = "auto"
    bootstrap: int = 1000
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (see :mod:`engine.methods.scoring`); numbers rounded to 6 places."""

        def group(g: GroupScores) -> dict[str, Any]:
            metrics = {k: {"value": _round(e.value), "low": _round(e.low), "high": _round(e.high)} for k, e in g.metrics.items()}
            return {"questions": g.questions, "no_gold": g.no_gold, "metrics": metrics}

        return {
            "match": self.match,
            "by": self.by,
            "bootstrap": {"resamples": self.bootstrap, "seed": self.seed, "confidence": CONFIDENCE},
            "sets": {name: {"overall": group(s.overall), "hops": {k: group(g) for k, g in s.hops.items()},
                            "qtype": {k: group(g) for k, g in s.qtype.items()}} for name, s in self.sets.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        """A report back from :meth:`to_json`'s form (a results file)."""

        def group(g: dict[str, Any]) -> GroupScores:
            metrics = {k: Estimate(e["value"], e["low"], e["high"]) for k, e in g["metrics"].items()}
            return GroupScores(g["questions"], g["no_gold"], metrics)

        try:
            sets = {name: SetScores(group(s["overall"]), {k: group(g) for k, g in s["hops"].items()},
                                    {k: group(g) for k, g in s["qtype"].items()}) for name, s in data["sets"].items()}
            return cls(sets, data["match"], data["by"], data["bootstrap"]["resamples"], data["bootstrap"]["seed"])
        except (KeyError, TypeError, AttributeError) as e:
            raise InvalidInputError(f"not a scoring report (kgqa eval --json): missing or malformed {e}") from e


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _texts(record: dict[str, Any]) -> tuple[Any, list[str]]:
    """What the text conventions read: the prediction and the gold names; a record whose gold
    answers are ids only is read as its predicted and gold ids."""
    answers = [str(a) for a in record.get("answers") or []]
    if any(normalize(a) for a in answers):
        return record.get("prediction"), answers
    return record.get("prediction_ids") or [], [str(a) for a in record.get("answer_ids") or []]


def _webqsp(record: dict[str, Any], by: str) -> float:
    """WebQSP F1 by id over the record's ``parses`` (else its ``answer_ids`` as one parse) where
    both sides have ids and ``by`` allows, else by normalised name over ``answers``."""
    parses = record.get("parses")  # its kind checked with the record's (metrics.checked_records)
    gold_ids = [[str(a) for a in p] for p in parses] if parses else [[str(a) for a in record.get("answer_ids") or []]]
    has_ids = any(gold_ids) and record.get("prediction_ids") is not None
    if by == "id" and not has_ids:
        raise InvalidInputError(
            f"record {record.get('id', '?')!r} has no gold ids ('parses' or 'answer_ids') and 'prediction_ids' to compare by id"
        )
    if has_ids and by != "name":
        return webqsp_f1([str(p) for p in record["prediction_ids"]], gold_ids)
    prediction = record.get("prediction") or []
    predicted = [normalize(p) for p in ([prediction] if isinstance(prediction, str) else prediction)]
    return webqsp_f1([p for p in predicted if p], [[g for g in map(normalize, record.get("answers") or []) if g]])


def question_row(record: dict[str, Any], match: str = "exact", by: str = "auto") -> list[float] | None:
    """One record's per-question values in the order of ``_COLUMNS``; None without gold answers."""
    s = score_record(record, match, by)
    if s is None:
        return None
    prediction, gold = _texts(record)
    return [s.hits1, s.hits1_any, rog_hit(prediction, gold), gnn_rag_hit1(prediction, gold), tog_em(prediction, gold),
            _webqsp(record, by), s.f1, s.precision, s.recall]


def _metrics(means: np.ndarray) -> dict[str, np.ndarray]:
    """Column means (shape ``(..., len(_COLUMNS))``) → each metric of :data:`METRICS`."""
    col = dict(zip(_COLUMNS, np.moveaxis(means, -1, 0)))
    p, r = col["precision"], col["recall"]
    with np.errstate(invalid="ignore", divide="ignore"):
        answer_f1 = np.where(p + r > 0, 2 * p * r / (p + r), 0.0)
    return {**{k: col[k] for k in METRICS if k in col}, "macro_f1": col["f1"], "answer_f1": answer_f1}


def _group(rows: Sequence[list[float]], no_gold: int, resamples: int, seed: int) -> GroupScores:
    if not rows:
        return GroupScores(0, no_gold, {k: Estimate(None) for k in METRICS})
    table = np.asarray(rows, dtype=np.float64)
    point = _metrics(table.mean(axis=0))
    bounds: dict[str, tuple[float | None, float | None]] = {}
    if resamples:
        rng = np.random.default_rng(seed)
        n = len(table)
        chunks = []
        for start in range(0, resamples, _CHUNK):
            c = min(_CHUNK, resamples - start)
            # how often each question is drawn in each of c resamples, then the resamples' means
            draws = rng.integers(0, n, size=(c, n)) + n * np.arange(c)[:, None]
            chunks.append(np.bincount(draws.ravel(), minlength=c * n).reshape(c, n) @ table / n)
        means = np.concatenate(chunks)
        tail = (1 - CONFIDENCE) / 2 * 100
        for k, v in _metrics(means).items():
            low, high = np.percentile(v, [tail, 100 - tail])
            bounds[k] = (float(low), float(high))
    return GroupScores(len(rows), no_gold, {k: Estimate(float(point[k]), *bounds.get(k, (None, None))) for k in METRICS})


def _group_order(key: tuple[str, str]) -> tuple[str, int, str]:
    """Groups in a stable order, hop counts numerically (10 after 9)."""
    kind, name = key
    return kind, int(name) if name.isdigit() else 0, name


def score(
    records: Iterable[dict[str, Any]],
    *,
    match: str = "exact",
    by: str = "auto",
    bootstrap: int = 1000,
    seed: int = 0,
    default_set: str = "all",
) -> Report:
    """Every metric of :data:`METRICS` over prediction records, per set (a record's ``set`` or
    ``dataset``, else ``default_set``), overall and per ``hops`` and ``qtype``, each with a
    percentile-bootstrap interval from ``bootstrap`` resamples of the group's questions drawn
    with ``seed`` (0 resamples: no intervals). ``match`` and ``by`` choose how Hits@1,
    precision, recall and the F1s compare answers (:func:`engine.methods.metrics.evaluate`)."""
    check_modes(match, by)
    check_bootstrap(bootstrap)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidInputError(f"invalid seed {seed!r}: give a whole number ≥ 0")
    rows: dict[str, dict[tuple[str, str], list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    no_gold: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for record in checked_records(records):
        name = str(record.get("set") or record.get("dataset") or default_set)
        keys = [("overall", "")]
        if record.get("hops") is not None:
            keys.append(("hops", str(record["hops"])))
        if record.get("qtype"):
            keys.append(("qtype", str(record["qtype"])))
        row = question_row(record, match, by)
        for key in keys:
            if row is None:
                no_gold[name][key] += 1
            else:
                rows[name][key].append(row)
    sets: dict[str, SetScores] = {}
    for name in sorted(set(rows) | set(no_gold)):
        groups = {key: _group(rows[name][key], no_gold[name][key], bootstrap, seed)
                  for key in sorted(set(rows[name]) | set(no_gold[name]), key=_group_order)}
        sets[name] = SetScores(groups[("overall", "")],
                               {k: g for (kind, k), g in groups.items() if kind == "hops"},
                               {k: g for (kind, k), g in groups.items() if kind == "qtype"})
    return Report(sets, match, by, bootstrap, seed)


#: the conventions that read text their own way (``match`` and ``by`` do not apply)
_TEXT_RULES = {"rog_hit", "gnn_rag_hit1", "tog_em"}
#: the metrics the full text table shows (precision and recall are in the JSON)
TABLE_METRICS = tuple(m for m in METRICS if m not in ("precision", "recall"))
#: ``kgqa eval --protocol``: the metrics each short report shows
PROTOCOLS: dict[str, tuple[str, ...]] = {
    "all": TABLE_METRICS, "hits1": ("hits1",), "rog": ("rog_hit",), "gnn-rag": ("gnn_rag_hit1",), "tog": ("tog_em",),
    "webqsp": ("webqsp_f1",),
}


def format_scores(report: Report, metrics: Sequence[str] = TABLE_METRICS) -> str:
    """The report as text: per set, one row per group (overall, each hop count, each question
    type) and one column per metric, each row followed by its intervals."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise InvalidInputError(f"unknown metric {unknown[0]!r}: use {', '.join(METRICS)}")
    intervals = report.bootstrap > 0
    inline = intervals and len(metrics) == 1  # one metric: its interval beside it, not under it
    widths = [max(len(LABELS[m]) + 2, 13) for m in metrics]

    def value(e: Estimate) -> str:
        return "-" if e.value is None else f"{e.value:.3f}"

    def interval(e: Estimate) -> str:
        return "" if e.low is None or e.high is None else f"[{e.low:.2f},{e.high:.2f}]"

    settings = [f"match: {report.match}, compared by: {report.by}"] if set(metrics) - _TEXT_RULES else []
    if intervals:
        where = "beside" if inline else "under"
        settings.append(f"{where} each value its {CONFIDENCE:.0%} bootstrap interval ({report.bootstrap:,} resamples, seed {report.seed})")
    lines = ["; ".join(settings)] if settings else []
    for name, s in report.sets.items():
        if lines:
            lines.append("")
        lines.append(f"set {name}: {s.overall.questions} questions"
                     + (f" ({s.overall.no_gold} without gold answers, not scored)" if s.overall.no_gold else ""))
        groups = [("all", s.overall), *((f"{h}-hop", g) for h, g in s.hops.items()), *s.qtype.items()]
        # whole question types: MetaQA's 3-hop ones differ only past their 23rd character
        label_width = max(24, *(len(label) + 1 for label, _ in groups))
        lines.append(f"{'group':<{label_width}}{'n':>6}" + "".join(f"{LABELS[m]:>{w}}" for m, w in zip(metrics, widths))
                     + (f"{'interval':>13}" if inline else ""))
        for label, g in groups:
            lines.append(f"{label:<{label_width}}{g.questions:>6}" + "".join(f"{value(g.metrics[m]):>{w}}" for m, w in zip(metrics, widths))
                         + (f"{interval(g.metrics[metrics[0]]):>13}" if inline else ""))
            if intervals and not inline and g.questions:
                lines.append(" " * (label_width + 6) + "".join(f"{interval(g.metrics[m]):>{w}}" for m, w in zip(metrics, widths)))
    return "\n".join(lines)
