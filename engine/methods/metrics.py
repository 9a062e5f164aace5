"""Answer metrics for every method: Hits@1, precision, recall and F1, overall and per group.

Definitions (LDR, Appendix C, which the field should use):
- Hits@1: the **first** predicted answer is a gold answer (LDR Eq. 13);
- ``hits1_any``: **any** predicted answer is a gold answer (Eq. 14, the variant RoG reported);
- precision / recall per question (correct predictions / predictions; gold answers found /
  gold answers), averaged over questions; ``f1`` is the harmonic mean of the averaged
  precision and recall; ``f1_mean`` the mean of per-question F1 (what RoG's evaluator prints).

Answers are compared by id where the record has both gold ids (``answer_ids``) and predicted
ids (``prediction_ids``): Freebase names are not unique, ids are. Otherwise by name, after
RoG's normalisation (lowercase; punctuation, articles and extra spaces removed):
``match="exact"`` wants equal normalised strings; ``match="contains"`` lets a gold answer match
a prediction that contains it. ``by`` forces one of the two (``"id"`` or ``"name"``).

:func:`evaluate_rog` is RoG's own evaluator (``evaluate_results.py``) for comparison with the
paper: Hits over the predictions joined into one text, and F1 whose precision divides the
gold answers found by the number of predictions. Every scoring convention of the field (RoG's
Hit, GNN-RAG's Hit1, ToG's lenient match, WebQSP's official F1) with bootstrap intervals, per
set, hop count and question type, is :mod:`engine.methods.scoring` (``kgqa eval``).

A predictions file is JSONL, one question per line: ``answers`` (gold, a list) and
``prediction`` (a list, best first; a string counts as one answer), optionally
``answer_ids``/``prediction_ids``, and ``hops`` and ``qtype`` for the breakdowns. Questions
without gold answers are counted, not scored.
"""
from __future__ import annotations

import functools
import re
import string
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError, ParseError, clipped
from engine.identifiers import check_list
from engine.jsonl import json_lines

MATCH_MODES = ("exact", "contains")
#: what answers are compared by: ids where both sides have them (auto), ids, or names
BY_MODES = ("auto", "id", "name")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """RoG's answer normalisation: lowercase, no punctuation, no articles, single spaces."""
    return _normalize(str(text))


@functools.lru_cache(maxsize=1 << 16)
def _normalize(text: str) -> str:  # cached: scoring a file normalises each answer many times
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


class Substrings:
    """Which of many patterns occur in texts, in time linear in the patterns' and texts' lengths
    (Aho–Corasick), where testing each pattern against each text would take their product: a
    record may carry thousands of gold answers and predictions."""

    def __init__(self, patterns: Iterable[str]) -> None:
        #: the distinct non-empty patterns; :meth:`scan` reports them by their place here
        self.patterns = list(dict.fromkeys(p for p in patterns if p))
        goto: list[dict[str, int]] = [{}]
        ends: list[int] = [-1]  # the pattern that ends at each state, or -1
        for i, pattern in enumerate(self.patterns):
            state = 0
            for ch in pattern:
                nxt = goto[state].get(ch)
                if nxt is None:
                    nxt = goto[state][ch] = len(goto)
                    goto.append({})
                    ends.append(-1)
                state = nxt
            ends[state] = i
        fail = [0] * len(goto)
        # the nearest state down the failure chain (itself first) where a pattern ends, or -1
        output = [i if ends[i] >= 0 else -1 for i in range(len(goto))]
        queue = deque(goto[0].values())
        while queue:
            state = queue.popleft()
            for ch, nxt in goto[state].items():
                back = fail[state]
                while back and ch not in goto[back]:
                    back = fail[back]
                fail[nxt] = goto[back].get(ch, 0) if state else 0
                if output[nxt] < 0:
                    output[nxt] = output[fail[nxt]]
                queue.append(nxt)
        self._goto, self._fail, self._ends, self._output = goto, fail, ends, output
        # the next state down the failure chain (itself excluded) where a pattern ends, or -1
        self._next_output = [output[fail[i]] if i else -1 for i in range(len(goto))]
        self._reported: set[int] = set()

    def scan(self, text: str, found: set[int]) -> bool:
        """Whether a pattern occurs in ``text``; adds the place of each pattern that occurs in
        it to ``found`` (those found in earlier texts may be left out: :meth:`scan` walks each
        state's patterns once over all texts)."""
        goto, fail, ends, output, next_output = self._goto, self._fail, self._ends, self._output, self._next_output
        state, any_found = 0, False
        for ch in text:
            while state and ch not in goto[state]:
                state = fail[state]
            state = goto[state].get(ch, 0)
            at = output[state]
            if at >= 0:
                any_found = True
                while at >= 0 and at not in self._reported:
                    self._reported.add(at)
                    found.add(ends[at])
                    at = next_output[at]
        return any_found


def matches(prediction: str, gold: str, match: str = "exact") -> bool:
    """Whether one predicted answer matches one gold answer (both normalised)."""
    p, g = normalize(prediction), normalize(gold)
    if not g:
        return False
    return p == g if match == "exact" else g in p


@dataclass(frozen=True)
class QuestionScore:
    hits1: float
    hits1_any: float
    precision: float
    recall: float

    @property
    def f1(self) -> float:
        return _harmonic(self.precision, self.recall)


@dataclass(frozen=True)
class Metrics:
    questions: int
    hits1: float
    hits1_any: float
    precision: float
    recall: float
    f1: float
    f1_mean: float


@dataclass(frozen=True)
class Report:
    match: str
    overall: Metrics
    by_hops: dict[str, Metrics] = field(default_factory=dict)
    by_qtype: dict[str, Metrics] = field(default_factory=dict)
    no_gold: int = 0


def _harmonic(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def _distinct(answers: Iterable[str]) -> list[str]:
    """Answers deduplicated by their normalised form, first occurrence kept, empty ones dropped."""
    seen: dict[str, str] = {}
    for a in answers:
        key = normalize(a)
        if key and key not in seen:
            seen[key] = a
    return list(seen.values())


def score_question(prediction: Sequence[str] | str, answers: Sequence[str], match: str = "exact") -> QuestionScore:
    """One question's Hits@1 (first answer and any answer), precision and recall, by names."""
    check_modes(match, "auto")
    predicted = [normalize(p) for p in _distinct([prediction] if isinstance(prediction, str) else prediction)]
    gold = [normalize(g) for g in _distinct(answers)]
    if not gold:
        raise InvalidInputError("a question without gold answers cannot be scored")
    if match == "exact":
        return _score(predicted, gold)
    # contains: a prediction is correct when a gold answer is a substring of it, as matches() says
    substrings = Substrings(gold)
    found: set[int] = set()
    correct = [substrings.scan(p, found) for p in predicted]
    return _question_score(correct, len(found), len(gold))


def score_ids(prediction_ids: Sequence[str], answer_ids: Sequence[str]) -> QuestionScore:
    """One question's scores with answers compared by id (equal strings)."""
    predicted = list(dict.fromkeys(str(p) for p in prediction_ids if str(p)))
    gold = list(dict.fromkeys(str(g) for g in answer_ids if str(g)))
    if not gold:
        raise InvalidInputError("a question without gold answer ids cannot be scored by id")
    return _score(predicted, gold)


def _score(predicted: Sequence[str], gold: Sequence[str]) -> QuestionScore:
    """Scores of distinct predictions against distinct gold answers, equal strings matching."""
    gold_set, predicted_set = set(gold), set(predicted)
    return _question_score([p in gold_set for p in predicted], sum(g in predicted_set for g in gold), len(gold))


def _question_score(correct: Sequence[bool], found: int, gold: int) -> QuestionScore:
    """From whether each prediction is correct (best first) and how many of the ``gold`` answers were found."""
    return QuestionScore(
        hits1=float(bool(correct) and correct[0]),
        hits1_any=float(any(correct)),
        precision=sum(correct) / len(correct) if correct else 0.0,
        recall=found / gold,
    )


def aggregate(scores: Sequence[QuestionScore]) -> Metrics:
    n = len(scores)
    if n == 0:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    def mean(values: Iterable[float]) -> float:
        return sum(values) / n

    precision, recall = mean(s.precision for s in scores), mean(s.recall for s in scores)
    return Metrics(
        questions=n,
        hits1=mean(s.hits1 for s in scores),
        hits1_any=mean(s.hits1_any for s in scores),
        precision=precision,
        recall=recall,
        f1=_harmonic(precision, recall),
        f1_mean=mean(s.f1 for s in scores),
    )


def _by_ids(record: dict[str, Any], by: str) -> bool:
    has_ids = bool(record.get("answer_ids")) and record.get("prediction_ids") is not None
    if by == "id" and not has_ids:
        raise InvalidInputError(f"record {record.get('id', '?')!r} has no 'answer_ids' and 'prediction_ids' to compare by id")
    return by == "id" or (by == "auto" and has_ids)


#: the most bootstrap resamples :func:`engine.methods.scoring.score` draws: at 100,000 over 2,000
#: questions it takes about 10 s and 64 MB (time grows with resamples × questions)
MAX_BOOTSTRAP = 100_000


def check_bootstrap(resamples: object) -> int:
    """``resamples`` if it is a number of bootstrap resamples, 0 (no intervals) to :data:`MAX_BOOTSTRAP`."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or not 0 <= resamples <= MAX_BOOTSTRAP:
        raise InvalidInputError(
            f"invalid bootstrap {resamples!r}: give a number of resamples from 0 (no intervals) to {MAX_BOOTSTRAP:,}")
    return resamples


def check_modes(match: str, by: str) -> None:
    """Reject a match mode or comparison that does not exist, naming the choices."""
    if match not in MATCH_MODES:
        raise InvalidInputError(f"invalid match mode {match!r}: use {' or '.join(MATCH_MODES)}")
    if by not in BY_MODES:
        raise InvalidInputError(f"invalid comparison {by!r}: use {', '.join(BY_MODES)}")


def score_record(record: dict[str, Any], match: str = "exact", by: str = "auto") -> QuestionScore | None:
    """One prediction record's scores, by ids where ``by`` says so (see :func:`evaluate`), else
    by names; None when the record has no gold answer to score against."""
    answers = record.get("answers") or []
    if not _distinct(answers) and not record.get("answer_ids"):
        return None
    if _by_ids(record, by):
        return score_ids(record["prediction_ids"], record["answer_ids"])
    if not _distinct(answers):
        return None
    return score_question(record.get("prediction") or [], answers, match)


def evaluate(records: Iterable[dict[str, Any]], match: str = "exact", by: str = "auto") -> Report:
    """Metrics over prediction records, overall and per ``hops`` and ``qtype``."""
    check_modes(match, by)
    scored: list[QuestionScore] = []
    by_hops: dict[str, list[QuestionScore]] = defaultdict(list)
    by_qtype: dict[str, list[QuestionScore]] = defaultdict(list)
    no_gold = 0
    for record in checked_records(records):
        s = score_record(record, match, by)
        if s is None:
            no_gold += 1
            continue
        scored.append(s)
        if record.get("hops") is not None:
            by_hops[str(record["hops"])].append(s)
        if record.get("qtype"):
            by_qtype[str(record["qtype"])].append(s)
    return Report(
        match=match,
        overall=aggregate(scored),
        by_hops={k: aggregate(v) for k, v in sorted(by_hops.items())},
        by_qtype={k: aggregate(v) for k, v in sorted(by_qtype.items())},
        no_gold=no_gold,
    )


@dataclass(frozen=True)
class RogMetrics:
    """RoG's evaluator: ``hit`` and ``accuracy`` (gold answers found / gold answers) and F1
    with precision = gold answers found / predictions."""

    questions: int
    hit: float
    accuracy: float
    precision: float
    recall: float
    f1: float


def rog_lines(prediction: Sequence[Any] | str | None) -> list[str]:
    """A prediction as RoG's evaluator reads it: a text is split into lines (blank ones kept);
    a list keeps each distinct answer once, the most frequent first (ties in their order)."""
    if isinstance(prediction, str):
        return prediction.split("\n")
    counts = Counter(str(p) for p in prediction or [])
    return sorted(counts, key=lambda p: -counts[p])


def rog_question(prediction: Sequence[Any] | str | None, answers: Sequence[Any]) -> RogMetrics:
    """One question under RoG's ``evaluate_results.py`` (``questions`` is 1): a gold answer is
    found when its normalised text is a substring of the normalised prediction lines joined by
    spaces; ``hit`` is 1 when one is found, ``accuracy`` and ``recall`` the share found,
    ``precision`` the number found over the number of lines (it can pass 1 when one line names
    several answers), F1 their harmonic mean. Gold answers are taken as given, repeats
    included; one that normalises to nothing is left out (RoG's code would find it in any
    text)."""
    gold = [str(a) for a in answers if normalize(a)]
    if not gold:
        raise InvalidInputError("a question without gold answers cannot be scored")
    lines = rog_lines(prediction)
    text = normalize(" ".join(lines))
    keys = [normalize(a) for a in gold]
    substrings = Substrings(keys)
    occurring: set[int] = set()
    substrings.scan(text, occurring)
    in_text = {substrings.patterns[i] for i in occurring}
    found = sum(key in in_text for key in keys)
    recall = found / len(gold)
    precision = found / len(lines) if lines else 0.0
    return RogMetrics(1, float(found > 0), recall, precision, recall, _harmonic(precision, recall))


def evaluate_rog(records: Iterable[dict[str, Any]]) -> RogMetrics:
    """RoG's ``evaluate_results.py`` (with ``--cal_f1``) over prediction records: the mean of
    :func:`rog_question` over the records that have a gold answer."""
    rows = [rog_question(r.get("prediction"), r.get("answers") or []) for r in checked_records(records)
            if _distinct(r.get("answers") or [])]
    n = len(rows)

    def mean(name: str) -> float:
        return sum(getattr(row, name) for row in rows) / n if n else 0.0

    return RogMetrics(n, mean("hit"), mean("accuracy"), mean("precision"), mean("recall"), mean("f1"))


def validity_ratio(steps: Iterable[bool]) -> float | None:
    """FiDeLiS's VR: the share of reasoning steps that are triples of the graph (None: no step)."""
    flags = list(steps)
    return sum(flags) / len(flags) if flags else None


def coverage_ratio(retrieved: Iterable[Sequence[str]], gold: Iterable[Sequence[str]]) -> float | None:
    """FiDeLiS's CR: the share of ground-truth relation paths among the retrieved candidates'
    relation paths (None: no gold path)."""
    have = {tuple(p) for p in retrieved}
    wanted = list(dict.fromkeys(tuple(p) for p in gold))
    return sum(p in have for p in wanted) / len(wanted) if wanted else None


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a predictions JSONL file (each needs ``answers`` and ``prediction``)."""
    records = []
    first: dict[tuple[Any, Any], str] = {}
    for n, record in json_lines(path, "predictions file"):
        problem = _record_problem(record) or _repeated(record, f"line {n}", first)
        if problem:
            raise ParseError(problem, source=str(path), line=n)
        records.append(record)
    if not records:
        raise InvalidInputError(f"predictions file {str(path)!r} holds no predictions: nothing to score "
                                "(a method's run writes one JSON object a question, with --out)")
    return records


def _values(value: Any) -> bool:
    """A list of answer values: strings, or numbers (a year written as one)."""
    return isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value)


def checked_records(records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``records`` as scoring takes them, each checked as :func:`read_predictions` checks a
    file's lines; a wrong one is named by its place in ``records``."""
    if isinstance(records, (str, Path)):
        raise InvalidInputError(f"expected prediction records (dicts), got the file name {str(records)!r}: "
                                "read the file with read_predictions(path)")
    check_list(records, "records", "prediction records (dicts)")
    first: dict[tuple[Any, Any], str] = {}
    for n, record in enumerate(records):
        problem = _record_problem(record) or _repeated(record, f"record {n}", first)
        if problem:
            raise InvalidInputError(f"prediction record {n}: {problem}")
        yield record


def _record_problem(record: Any) -> str | None:
    """What is wrong with a prediction record, if anything: a string where a list goes would be
    scored letter by letter, so each field's kind is checked."""
    if not isinstance(record, dict) or "answers" not in record or "prediction" not in record:
        return "a record needs 'answers' and 'prediction'"
    if not _values(record["answers"]):
        return "'answers' must be a list of the gold answers (strings)"
    prediction = record["prediction"]
    if not (prediction is None or isinstance(prediction, str) or _values(prediction)):
        return "'prediction' must be a list of answers, best first (strings), or an LLM's text"
    for key in ("answer_ids", "prediction_ids"):
        if record.get(key) is not None and not _values(record[key]):
            return f"'{key}' must be a list of ids (strings), or null"
    hops = record.get("hops")
    if hops is not None and (isinstance(hops, bool) or not isinstance(hops, int)):
        return "'hops' must be a whole number, or null"
    for key in ("qtype", "set", "dataset"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"'{key}' must be a string, or null"
    if record.get("id") is not None and (isinstance(record["id"], bool) or not isinstance(record["id"], (str, int))):
        return "'id' must be a string or a whole number, or null"
    parses = record.get("parses")
    if parses is not None and not (isinstance(parses, list) and all(_values(p) for p in parses)):
        return "'parses' must be a list of lists of gold answer ids (strings), or null"
    return None


def _repeated(record: dict[str, Any], place: str, first: dict[tuple[Any, Any], str]) -> str | None:
    """Where a record asks the question of an earlier one (the same ``id`` in the same set):
    scored twice, it would count twice. ``first``: where each (set, id) came first."""
    if record.get("id") is None:
        return None
    key = (record.get("set") or record.get("dataset"), record["id"])
    if key in first:
        return (f"question id {clipped(repr(key[1]), 80)} comes twice (first at {first[key]}): a predictions "
                "file holds one record a question; remove the repeat, or give each run's records its own 'set'")
    first[key] = place
    return None


def format_report(report: Report) -> str:
    """The report as a text table, one row per group."""
    header = f"{'group':<34}{'n':>6}{'Hits@1':>9}{'Hits@1-any':>12}{'P':>8}{'R':>8}{'F1':>8}{'F1-mean':>9}"
    lines = [f"match: {report.match}" + (f"   (questions without gold answers: {report.no_gold})" if report.no_gold else ""), header]

    def row(name: str, m: Metrics) -> str:
        return (
            f"{name[:33]:<34}{m.questions:>6}{m.hits1:>9.3f}{m.hits1_any:>12.3f}{m.precision:>8.3f}"
            f"{m.recall:>8.3f}{m.f1:>8.3f}{m.f1_mean:>9.3f}"
        )

    lines.append(row("all", report.overall))
    lines += [row(f"{hops}-hop", m) for hops, m in report.by_hops.items()]
    lines += [row(qtype, m) for qtype, m in report.by_qtype.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- retrieval quality (LDR §4.3, §4.6)
def relation_recall(retrieved: Iterable[str], gold: Iterable[str]) -> float:
    """LDR Eq. 10: the share of the gold structure's relations the retrieved subgraph holds."""
    wanted = set(gold)
    if not wanted:
        raise InvalidInputError("relation recall needs at least one gold relation")
    return len(wanted & set(retrieved)) / len(wanted)


def graph_hit(entities: Iterable[str], answers: Iterable[str]) -> float:
    """LDR Eq. 12: 1.0 when the retrieved subgraph holds a gold answer, else 0.0."""
    return float(not set(answers).isdisjoint(entities))


#: a rooted tree with labelled edges: entry i is (parent, label) of node i + 1; node 0 is the root
Tree = Sequence[tuple[int, str]]


def tree_edit_distance(a: Tree, b: Tree) -> int:
    """LDR Eq. 11 on rooted trees: the fewest edge edits (add a leaf edge, delete a leaf edge,
    change an edge's label, one operation each) that turn ``a`` into ``b``, the roots kept.

    Exact: the best top-down mapping of the two trees, found by recursion over each pair of
    mapped nodes with a search over the matchings of their children, by subsets of the smaller
    set of children (trees of a few dozen edges; of two mapped nodes, one may have at most 16
    children, the other any number: LDR's retrieved tree against a gold chain)."""

    def shape(tree: Tree) -> tuple[list[list[int]], list[str], list[int]]:
        kids: list[list[int]] = [[] for _ in range(len(tree) + 1)]
        labels = [""] * (len(tree) + 1)
        for i, (parent, label) in enumerate(tree, 1):
            if not 0 <= parent < i:
                raise InvalidInputError(f"tree node {i} has parent {parent}: a parent must come before its children")
            kids[parent].append(i)
            labels[i] = label
        sizes = [0] * (len(tree) + 1)  # edges below each node
        for i in range(len(tree), 0, -1):
            sizes[tree[i - 1][0]] += sizes[i] + 1
        return kids, labels, sizes

    kids_a, labels_a, size_a = shape(a)
    kids_b, labels_b, size_b = shape(b)

    @functools.cache
    def mapped(u: int, v: int) -> int:
        ku, kv = kids_a[u], kids_b[v]
        if min(len(ku), len(kv)) > 16:
            raise InvalidInputError("tree edit distance: two nodes to be mapped have more than 16 children each")
        # walk the larger set of children; the smaller one's used members are a bit set
        flipped = len(kv) > len(ku)
        walked, subset = (kv, ku) if flipped else (ku, kv)
        walked_size, subset_size = (size_b, size_a) if flipped else (size_a, size_b)

        def pair(x: int, y: int) -> int:  # x walked, y in the subset: map x's edge onto y's
            w, z = (y, x) if flipped else (x, y)
            return (labels_a[w] != labels_b[z]) + mapped(w, z)

        @functools.cache
        def best(i: int, used: int) -> int:
            if i == len(walked):
                return sum(subset_size[y] + 1 for j, y in enumerate(subset) if not used >> j & 1)
            x = walked[i]
            cost = walked_size[x] + 1 + best(i + 1, used)  # x's edge and everything below it, deleted (or added)
            for j, y in enumerate(subset):
                if not used >> j & 1:
                    cost = min(cost, pair(x, y) + best(i + 1, used | 1 << j))
            return cost

        return best(0, 0)

    return mapped(0, 0)
