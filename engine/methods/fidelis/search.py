"""Deductive-verification beam search (FiDeLiS §2.2), for a batch of questions in lock step.

Per question: one plan (F.1). Per topic entity, a beam search as the authors' code runs it:
at each step every beam but the first step's is verified (F.2, or F.3 with the adequacy
verifier); a verified beam is finished and not extended; the other beams are extended by
Path-RAG's top-n candidates, and the LLM picks the best ``width`` of all of them (F.4). After
``depth`` extensions a last verification runs; if no path was verified, the last beams are the
reasoning paths. The answer comes from the reasoning paths (F.5), or is their ends.

All questions of a batch advance together, so every stage is one batched call: one plan
generation for all questions, one keyword encoding, per step one store call for all beams'
neighbourhoods and one for the lookahead, one generation batch for all verifications and one
for all rankings, and one for all answers. The search is one program for the batch
(:mod:`engine.methods.lockstep`): its store calls are requests, served on the store it is run
on. A neighbourhood call's limit bounds the batch's call as a whole (its cut is the batch's).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from engine.errors import InvalidInputError
from engine.methods.fidelis import prompts
from engine.methods.fidelis.index import EmbeddingIndex
from engine.methods.fidelis.parsing import (
    Plan,
    indices_settled,
    parse_answers,
    parse_indices,
    parse_plan,
    parse_yes,
    plan_settled,
    verdict_settled,
)
from engine.methods.fidelis.config import ALPHA, TOP_N
from engine.methods.fidelis.pathrag import (
    Candidate,
    Neighbourhoods,
    next_steps,
    score_steps,
)
from engine.graph import Edge, Literal, Path, Term
from engine.identifiers import UNBOUNDED
from engine.methods.lockstep import ExpandOf, NamesOf, Program, run
from engine.models.lm import BatchStop, LanguageModel
from engine.render import render_path, term_text
from engine.results import shown_when_set
from engine.store import Store
from loaders.questions import Question

VERIFIERS = ("deductive", "adequacy")
ANSWER_MODES = ("llm", "paths")


@dataclass(frozen=True)
class SearchConfig:
    width: int = 3
    depth: int = 3
    top_n: int = TOP_N
    alpha: float = ALPHA
    verifier: str = "deductive"
    answer_mode: str = "llm"
    #: most edges per batched ``expand`` (neighbourhoods, lookahead); None: no bound
    neighbour_limit: int | None = 20_000
    lookahead_limit: int | None = 200_000
    plan_tokens: int = 256
    rank_tokens: int = 32
    verify_tokens: int = 8
    answer_tokens: int = 64

    def __post_init__(self) -> None:
        if self.verifier not in VERIFIERS:
            raise InvalidInputError(f"unknown verifier {self.verifier!r}: use {' or '.join(VERIFIERS)}")
        if self.answer_mode not in ANSWER_MODES:
            raise InvalidInputError(f"unknown answer mode {self.answer_mode!r}: use {' or '.join(ANSWER_MODES)}")
        for name in ("width", "depth", "top_n"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"{name} must be at least 1, not {getattr(self, name)}")


@dataclass
class Usage:
    """One question's LLM prompts (the paper's 'LLM calls' are prompts) and unusable replies."""

    prompts: Counter = field(default_factory=Counter)
    malformed: Counter = field(default_factory=Counter)


@dataclass
class SearchStep:
    """One extension of a topic entity's beams, as the record shows it: how many candidates
    Path-RAG offered, the five best (path, score), the ranks the model chose (1-based), whether
    its reply was unusable and Path-RAG's order stood in, the new beams and their scores, and
    the verifier's verdict on each beam (once the next step verified them)."""

    candidates: int
    top: list[tuple[str, float]]
    chosen: list[int]
    fallback: bool
    beams: list[str]
    scores: list[float]
    verified: list[bool] | None = shown_when_set()


@dataclass
class TopicSearch:
    """One topic entity's search."""

    question: int
    topic: str
    beams: list[Path]
    finished: list[Path] = field(default_factory=list)
    retrieved: set[tuple[str, ...]] = field(default_factory=set)  # relation sequences of every candidate
    steps: list[SearchStep] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    done: bool = False

    @property
    def reasoning_paths(self) -> list[Path]:
        return self.finished or self.beams


@dataclass
class Outcome:
    """What the search found for one question."""

    plan: Plan
    searches: list[TopicSearch]
    answers: list[str]
    answer_ids: list[str] | None
    output: str | None
    usage: Usage
    names: dict[str, str | None]


class Searcher:
    """Runs the search for batches of questions against one store, index and language model."""

    def __init__(self, store: Store, index: EmbeddingIndex, lm: LanguageModel, config: SearchConfig, meter: Any = None) -> None:
        self.store, self.index, self.lm, self.config, self.meter = store, index, lm, config, meter
        self.names: dict[str, str | None] = {}
        self.truncated: Counter[str] = Counter()
        self.embedding_seconds = 0.0

    # ------------------------------------------------------------------ helpers
    @contextmanager
    def _embedding(self) -> Iterator[None]:
        """Encoder and Eq. 3 work: the meter's ``model`` stage; its seconds are also kept
        apart (read off the meter) as ``embedding_seconds``."""
        if self.meter is None:
            yield
            return
        before = self.meter.seconds.get("model", 0.0)
        with self.meter.stage("model"):
            yield
        self.embedding_seconds += self.meter.seconds.get("model", 0.0) - before

    def _generate(
        self, items: Sequence[tuple[int, str, str]], usage: list[Usage], max_new_tokens: int, stop: BatchStop = None
    ) -> list[str]:
        """One batched generation; ``items`` are (question, stage, prompt); a reply ends once
        ``stop`` (its parser's ``*_settled``) holds."""
        if not items:
            return []
        outputs = self.lm.generate_batch([p for _, _, p in items], max_new_tokens=max_new_tokens, stop=stop)
        for (q, stage, _), g in zip(items, outputs):
            usage[q].prompts[stage] += 1
        return [g.text for g in outputs]

    def _name(self, nodes: Sequence[Term]) -> Program[None]:
        wanted = sorted({n for n in nodes if isinstance(n, str) and n not in self.names})
        if wanted:
            self.names.update((yield NamesOf(tuple(wanted))))

    def text(self, path: Path) -> str:
        return render_path(path, self.names)

    def statement(self, path: Path) -> str:
        """A path as the stored triples it walks, for F.2's ``parsed_reasoning_path``."""
        parts = []
        for edge in path.edges():
            t = edge.triple()
            parts.append(f"{term_text(t.subject, self.names)} {t.relation} {term_text(t.object, self.names)}")
        return ". ".join(parts) + "." if parts else term_text(path.start, self.names)

    # ------------------------------------------------------------------ the search
    def run(self, questions: Sequence[Question]) -> list[Outcome]:
        """:meth:`search` served on the searcher's store."""
        return run(self.search(questions), self.store)

    def search(self, questions: Sequence[Question]) -> Program[list[Outcome]]:
        """The search of a batch of questions, as one program (:mod:`engine.methods.lockstep`)
        whose every phase asks the store once for all the batch's beams."""
        c = self.config
        usage = [Usage() for _ in questions]
        replies = self._generate(
            [(i, "plan", prompts.plan_prompt(q.question)) for i, q in enumerate(questions)], usage, c.plan_tokens, plan_settled
        )
        plans = [parse_plan(r, q.question) for r, q in zip(replies, questions)]
        for u, p in zip(usage, plans):
            if not p.parsed:
                u.malformed["plan"] += 1
        with self._embedding():
            keyword_vectors = self.index.embed([p.keyword_text for p in plans])
        searches = [
            TopicSearch(i, topic, [Path((topic,), (), ())])
            for i, q in enumerate(questions)
            for topic in dict.fromkeys(q.topic_entities)
        ]
        yield from self._name([s.topic for s in searches])
        for step in range(c.depth + 1):
            active = [s for s in searches if not s.done]
            if not active:
                break
            if step > 0:
                self._verify(active, questions, plans, usage)
                active = [s for s in active if s.beams]
                for s in searches:
                    s.done = s.done or not s.beams
            if step == c.depth or not active:
                break
            yield from self._expand(active, keyword_vectors)
            active = [s for s in active if s.candidates]
            for s in searches:
                if not s.candidates:
                    s.done = True
            self._rank(active, questions, plans, usage)
        return self._answer(questions, plans, searches, usage)

    def _verify(self, searches: Sequence[TopicSearch], questions: Sequence[Question], plans: Sequence[Plan], usage: list[Usage]) -> None:
        items, owners = [], []
        for s in searches:
            for beam in s.beams:
                if self.config.verifier == "deductive":
                    conclusion = plans[s.question].conclusion(term_text(beam.end, self.names))
                    prompt = prompts.verify_prompt(conclusion, self.statement(beam))
                else:
                    prompt = prompts.adequacy_prompt(questions[s.question].question, self.text(beam))
                items.append((s.question, "verify", prompt))
                owners.append((s, beam))
        replies = self._generate(items, usage, self.config.verify_tokens, verdict_settled)
        verdicts: dict[int, list[bool]] = defaultdict(list)
        for (s, beam), reply in zip(owners, replies):
            yes = parse_yes(reply)
            if yes is None:
                usage[s.question].malformed["verify"] += 1
            verdicts[id(s)].append(bool(yes))
            if yes:
                s.finished.append(beam)
        for s in searches:
            s.steps[-1].verified = verdicts[id(s)]
            s.beams = [b for b, ok in zip(s.beams, verdicts[id(s)]) if not ok]

    def _expand(self, searches: Sequence[TopicSearch], keyword_vectors: np.ndarray) -> Program[None]:
        """Path-RAG for every beam of every search: two batched store calls, then Eq. 3."""
        c = self.config
        hood = yield from Neighbourhoods.fetching([b.end for s in searches for b in s.beams], c.neighbour_limit)
        steps = {id(s): [next_steps(b, hood) for b in s.beams] for s in searches}
        ends = [p.end for s in searches for per_beam in steps[id(s)] for p in per_beam]
        look = yield from Neighbourhoods.fetching(ends, c.lookahead_limit)
        self.truncated["neighbourhood"] += hood.truncated
        self.truncated["lookahead"] += look.truncated
        with self._embedding():
            for s in searches:
                s.candidates = []
                for b, extensions in enumerate(steps[id(s)]):
                    scores = score_steps(
                        keyword_vectors[s.question],
                        extensions,
                        look,
                        lambda rels: self.index.vectors("relations", rels),
                        lambda terms: self.index.vectors("entities", terms),
                        c.alpha,
                    )
                    ranked = sorted(zip(extensions, scores), key=lambda x: -x[1][0])[: c.top_n]
                    s.candidates += [Candidate(b, p, *sc) for p, sc in ranked]
                s.retrieved.update(p.relations for per_beam in steps[id(s)] for p in per_beam)
        yield from self._name([cand.path.end for s in searches for cand in s.candidates])

    def _rank(self, searches: Sequence[TopicSearch], questions: Sequence[Question], plans: Sequence[Plan], usage: list[Usage]) -> None:
        k = self.config.width
        items = [
            (s.question, "rank", prompts.rank_prompt(
                questions[s.question].question, plans[s.question].context, [self.text(c.path) for c in s.candidates], k))
            for s in searches
        ]
        settled = [partial(indices_settled, n_candidates=len(s.candidates), k=k) for s in searches]
        for s, reply in zip(searches, self._generate(items, usage, self.config.rank_tokens, settled)):
            chosen = parse_indices(reply, len(s.candidates), k)
            fallback = not chosen
            if fallback:  # unusable reply: Path-RAG's own order
                usage[s.question].malformed["rank"] += 1
                chosen = sorted(range(len(s.candidates)), key=lambda i: -s.candidates[i].score)[:k]
            s.beams = [s.candidates[i].path for i in chosen]
            s.steps.append(SearchStep(
                len(s.candidates),
                [(self.text(c.path), round(c.score, 4)) for c in sorted(s.candidates, key=lambda c: -c.score)[:5]],
                [i + 1 for i in chosen],
                fallback,
                [self.text(b) for b in s.beams],
                [round(s.candidates[i].score, 4) for i in chosen],
            ))

    def _answer(self, questions: Sequence[Question], plans: Sequence[Plan], searches: Sequence[TopicSearch], usage: list[Usage]) -> list[Outcome]:
        by_question: dict[int, list[TopicSearch]] = defaultdict(list)
        for s in searches:
            by_question[s.question].append(s)
        outputs: dict[int, list[str]] = defaultdict(list)
        if self.config.answer_mode == "llm":
            items = [
                (s.question, "answer", prompts.answer_prompt(questions[s.question].question, [self.text(p) for p in s.reasoning_paths]))
                for s in searches if s.reasoning_paths
            ]
            owners = [s for s in searches if s.reasoning_paths]
            for s, reply in zip(owners, self._generate(items, usage, self.config.answer_tokens)):
                outputs[s.question].append(reply)
        outcomes = []
        for i in range(len(questions)):
            found = by_question.get(i, [])
            ends: list[Term] = list(dict.fromkeys(p.end for s in found for p in s.reasoning_paths))
            if self.config.answer_mode == "llm":
                answers = list(dict.fromkeys(a for reply in outputs[i] for a in parse_answers(reply)))
                ids = None
            else:
                answers = [term_text(e, self.names) for e in ends]
                ids = [e.value if isinstance(e, Literal) else e for e in ends]
            outcomes.append(Outcome(plans[i], found, answers, ids, "\n".join(outputs[i]) or None, usage[i], self.names))
        return outcomes


def check_steps(store: Store, paths: Sequence[Path]) -> dict[Path, list[bool]]:
    """Whether each step of each path is a triple of the store: :func:`checking` served alone."""
    return run(checking(paths), store)


def checking(paths: Sequence[Path]) -> Program[dict[Path, list[bool]]]:
    """Whether each step of each path is a triple of the store, as a program: one batched ``expand``."""
    steps = [e for p in paths for e in p.edges()]
    srcs = sorted({e.src for e in steps if isinstance(e.src, str)})
    found: set[Edge] = set()
    if srcs:
        rels = sorted({e.relation for e in steps})
        edges, _ = yield ExpandOf(tuple(srcs), tuple(rels), "both", UNBOUNDED)
        found = set(edges)
    return {p: [e in found for e in p.edges()] for p in paths}
