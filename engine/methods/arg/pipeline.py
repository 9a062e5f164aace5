"""ARG-KBQA end to end: retrieval (the batch's store calls shared, :func:`retrieve_batch`) → prompt → K generated forms → alignment and
execution → majority vote over the answers, sorted, those a walk reaches without reusing an edge
first (:func:`engine.methods.arg.order.edge_distinct_first`), the question's own anchors last
(:func:`answer_questions`, :func:`engine.methods.run.topic_last`; greedy generation is batched across
the questions), and :class:`ArgMethod`,
ARG on the method-run protocol (:mod:`engine.methods.run`), with EM of the voted form against the
gold form. ``gold_form_f1`` is the F1 of the gold form's own answers: the ceiling F1 can reach
when the form is right (MetaQA's 2-hop gold answers leave out the topic entity, which e.g.
``(JOIN written_by (JOIN (R written_by) [X]))`` returns)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.methods.arg.alignment import Aligner
from engine.methods.arg.candidates import Schema
from engine.methods.arg.datasets import gold_form
from engine.methods.arg.generation import DemoPicker, forms_of, generate_outputs
from engine.methods.arg.order import edge_distinct_first
from engine.methods.arg.prompts import Demo, build_prompt
from engine.methods.arg.ranker import BiEncoder, Scorer
from engine.methods.arg.retrieval import K, retrieve_batch
from engine.errors import InvalidInputError, KGQAError, clipped
from engine.graph import Literal, Term, term_key
from engine.methods.lockstep import NamesOf, ask, serve
from engine.methods.meter import Meter
from engine.methods.metrics import normalize, score_question
from engine.models.lm import LanguageModel
from engine.models.sft import Sample
from engine.methods.run import topic_last
from engine.methods.spec import Method, Models, Prediction, check_options, empty_reply, option
from engine.sexpr import parse
from engine.store import Store
from loaders.questions import Question


@dataclass
class ArgAnswer:
    question: str
    references: list[str]
    generated: list[str]
    executed: list[str | None]
    sexpr: str | None
    answers: list[Term] = field(default_factory=list)
    count: int | None = None
    timed_out: int = 0  # candidate executions stopped at the aligner's timeout
    outputs: list[str] = field(default_factory=list)  # the LM's raw texts, one per sample
    demos: list[str] = field(default_factory=list)  # the demonstrations' questions, as prompted


def answer_questions(
    store: Store,
    questions: Sequence[tuple[str, Sequence[str | Literal]]],
    lm: LanguageModel,
    picker: DemoPicker,
    bi: BiEncoder,
    scorer: Scorer,
    aligner: Aligner,
    k: int = K,
    samples: int = 1,
    schema: Schema | None = None,
    meter: Meter | None = None,
) -> list[ArgAnswer]:
    """Each (question, anchors) answered: the batch's retrieval and alignment store calls
    shared (:mod:`engine.methods.lockstep`), its generations decoded together; the ranking
    models timed under ``meter``'s ``model`` stage."""
    retrievals = retrieve_batch(store, questions, bi, scorer, k, schema, meter=meter)
    references = [[r.text for r in retrieval.references] for retrieval in retrievals]
    demos = [picker.pick(question) for question, _ in questions]
    prompts = [build_prompt(question, refs, ds) for (question, _), refs, ds in zip(questions, references, demos, strict=True)]
    outputs = generate_outputs(lm, prompts, samples)
    forms = [forms_of(outs) for outs in outputs]
    aligner.prefetch(f for fs in forms for f in fs)
    answers = []
    for (question, anchors), refs, ds, outs, generated in zip(questions, references, demos, outputs, forms, strict=True):
        runs = [aligner.run(form, question) for form in generated]
        out = ArgAnswer(
            question, refs, generated, [r.sexpr for r in runs], None, timed_out=sum(r.timed_out for r in runs),
            outputs=outs, demos=[d.question for d in ds],
        )
        _vote(out, runs)
        ordered = edge_distinct_first(store, out.sexpr, out.answers, aligner.timeout)
        out.answers = topic_last(ordered, anchors)  # a form that goes out and back returns its anchor
        answers.append(out)
    return answers


def _vote(out: ArgAnswer, runs: Sequence[Any]) -> None:
    """The majority answer over the forms that ran (the first such form on a tie) into ``out``."""
    votes: Counter = Counter()
    first: dict[tuple, int] = {}
    for i, run in enumerate(runs):
        if run.result is not None:
            key = (tuple(run.result.answers), run.result.count)
            votes[key] += 1
            first.setdefault(key, i)
    if votes:
        best = max(votes, key=lambda key: (votes[key], -first[key]))
        out.sexpr = runs[first[best]].sexpr
        out.answers, out.count = sorted(best[0], key=term_key), best[1]


def why_empty(got: ArgAnswer) -> str:
    """Why ARG's answer is empty: no reply of the generator parsed to an S-expression, none of
    the forms ran after alignment, or the voted form answers nothing."""
    if not got.generated:
        return empty_reply("the generator", next((o for o in got.outputs if o.strip()), None), "parses to no S-expression")
    if got.sexpr is None:
        stopped = f" ({got.timed_out} stopped at the timeout)" if got.timed_out else ""
        return f"none of the generated S-expressions {clipped(', '.join(got.generated), 300)} runs on the store{stopped}"
    return f"the S-expression {clipped(got.sexpr, 300)} answers nothing"


def exact_match(predicted: str | None, gold: str) -> bool:
    """EM of logical forms: equal trees (so spacing does not matter)."""
    if predicted is None:
        return False
    try:
        return parse(predicted) == parse(gold)
    except KGQAError:
        return False


#: the generator the engine ships: a LoRA adapter of the offline model (:mod:`engine.models.adapters`),
#: built by ARG's lora recipe (engine/recipes/arg.toml), trained on prompts without demonstrations
SHIPPED_GENERATOR = "arg-generator"
#: with any other model: the paper's few-shot demonstrations per prompt, and its references kept
PAPER_DEMOS, PAPER_K = 10, K
#: what the shipped generator was trained with: no demonstrations, three references per prompt
SHIPPED_DEMOS, SHIPPED_K = 0, 3


@dataclass(frozen=True)
class ArgConfig:
    """Every option of ``kgqa arg run``, with their defaults (listed on docs/methods/arg.md)."""

    model: str | None = option(SHIPPED_GENERATOR, "causal LM: local path, hub id, LoRA adapter, or openai:MODEL[@URL] "
                               f"({SHIPPED_GENERATOR}: the shipped generator `kgqa reproduce arg --recipe lora` "
                               "trains; SmolLM2-135M-Instruct: its untrained base)")
    prompt_template: str | None = option(None, "chat (the tokenizer's, default), raw, llama2 or a string with {prompt}")
    pool: int = option(200, "demonstration candidates drawn from the train split")
    batch_size: int = option(8, "questions answered together: their greedy generations decoded together, their "
                             "retrieval store calls shared")
    n_demos: int | None = option(None, f"demonstrations in the prompt (default: {SHIPPED_DEMOS} with {SHIPPED_GENERATOR}, "
                                 f"which was trained so; {PAPER_DEMOS}, the paper's few-shot setting, with any other model)",
                                 least=0)
    demo_mode: str = option("bm25", "how demonstrations are picked", choices=("random", "bm25"))
    samples: int = option(1, "K forms generated; K > 1 votes over their answers")
    timeout: float = option(10.0, "seconds each candidate form may run before it counts as empty", least=0.001)
    k: int | None = option(None, f"paths and references kept (default: {SHIPPED_K} with {SHIPPED_GENERATOR}, which was "
                           f"trained so; {PAPER_K}, as in the paper, with any other model)")
    encoder: str | None = option(None, "stage-1 sentence encoder (default: offline all-MiniLM-L6-v2)")
    scorer: str | None = option(None, "a trained stage-2 scorer directory (default: the bi-encoder)")
    ontology: str | None = option(None, "GrailQA ontology folder (fb_roles) for class constraints")

    def __post_init__(self) -> None:
        check_options(self)

    @property
    def demonstrations(self) -> int:
        """How many demonstrations each prompt holds."""
        if self.n_demos is not None:
            return self.n_demos
        return SHIPPED_DEMOS if self.model == SHIPPED_GENERATOR else PAPER_DEMOS

    @property
    def references(self) -> int:
        """How many paths and references are kept."""
        if self.k is not None:
            return self.k
        return SHIPPED_K if self.model == SHIPPED_GENERATOR else PAPER_K


@dataclass(frozen=True)
class ArgTrace:
    """How ARG answered a question, as its record shows it: the demonstrations' questions, the
    references, the model's texts and the forms parsed from them, each form as it ran after
    alignment (None: no combination answered), the voted form and its count, how many
    executions hit the timeout; and the gold form, EM against it and the F1 of its own answers
    (None where the question has no gold form)."""

    demos: list[str]
    references: list[str]
    outputs: list[str]
    generated: list[str]
    executed: list[str | None]
    sexpr: str | None
    count: int | None
    timed_out: int
    gold_form: str | None
    em: bool | None
    gold_form_f1: float | None


class ArgMethod(Method):
    """ARG-KBQA over a question set; demonstrations come from ``pool`` (other questions)."""

    name = "arg"

    def __init__(
        self,
        store: Store,
        models: Models,
        config: ArgConfig,
        lm: LanguageModel,
        bi: BiEncoder,
        scorer: Scorer,
        pool: Sequence[Demo],
        *,
        schema: Schema | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(store, models, config.batch_size)
        self.lm, self.bi, self.scorer, self.k, self.samples, self.schema = lm, bi, scorer, config.references, config.samples, schema
        self.timeout = config.timeout
        self.picker = DemoPicker(pool, config.demonstrations, config.demo_mode, seed)
        self.aligner = Aligner(self.store, timeout=config.timeout)
        self.pool_size = len(pool)

    def _answer(self, questions: list[Question]) -> list[Prediction]:
        got = answer_questions(
            self.store, [(q.question, q.topic_entities) for q in questions], self.lm, self.picker, self.bi, self.scorer,
            self.aligner, self.k, self.samples, self.schema, self.meter,
        )
        # the answers' names: one call for the batch
        names = serve([ask(NamesOf(tuple(dict.fromkeys(a for a in g.answers if not isinstance(a, Literal))))) for g in got],
                      self.store)
        return [self._prediction(q, g, n) for q, g, n in zip(questions, got, names, strict=True)]

    def _prediction(self, q: Question, got: ArgAnswer, names: dict[str, str | None]) -> Prediction:
        texts = [a.value if isinstance(a, Literal) else (names.get(a) or a) for a in got.answers]
        trace = ArgTrace(got.demos, got.references, got.outputs, got.generated, got.executed, got.sexpr, got.count,
                         got.timed_out, **self._gold(q, got.sexpr))
        return Prediction(texts, [a.value if isinstance(a, Literal) else a for a in got.answers], trace,
                          None if texts else why_empty(got))

    def _gold(self, q: Question, sexpr: str | None) -> dict[str, Any]:
        """The gold form, EM against it and the F1 of its own answers (on the unmetered store:
        scoring is not answering)."""
        store = self.unmetered_store
        try:
            gold = gold_form(store, q)
        except KGQAError:
            return {"gold_form": None, "em": None, "gold_form_f1": None}
        try:
            gold_answers = [a.value if isinstance(a, Literal) else a for a in store.execute(gold, timeout=self.timeout).answers]
        except KGQAError:
            gold_answers = []
        expected = q.answer_entities or q.answers  # ids where the dataset gives them (the WebQSP slice's MIDs)
        f1 = score_question(gold_answers, expected).f1 if any(normalize(a) for a in expected) else None
        return {"gold_form": gold, "em": exact_match(sexpr, gold), "gold_form_f1": None if f1 is None else round(f1, 4)}

    def summary(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """EM, the share of questions with a parsable form and with an answer, and the F1 ceiling."""
        extras = [r["arg"] for r in records]
        with_gold = [e for e in extras if e["em"] is not None]
        ceiling = [e["gold_form_f1"] for e in extras if e["gold_form_f1"] is not None]
        n = max(len(extras), 1)
        return {
            "em": round(sum(e["em"] for e in with_gold) / max(len(with_gold), 1), 4),
            "parsed": round(sum(bool(e["generated"]) for e in extras) / n, 4),
            "answered": round(sum(e["sexpr"] is not None for e in extras) / n, 4),
            "gold_form_f1": round(sum(ceiling) / max(len(ceiling), 1), 4),
            "demos": self.pool_size,
        }


def retrieval_models(config: ArgConfig, device: str | None = None) -> tuple[BiEncoder, Scorer, Schema | None]:
    """The stage-1 encoder, the stage-2 scorer and the class schema the config names."""
    from engine.methods.arg.candidates import read_schema

    bi = BiEncoder(config.encoder)
    return bi, Scorer(bi, config.scorer), (read_schema(config.ontology) if config.ontology else None)


def build(config: ArgConfig, store: Store, models: Models) -> ArgMethod:
    """ARG as its config names it. Demonstrations: ``pool`` questions of the train split of the
    run's dataset, less any that repeat a question of the run (its text or gold form); built on
    the unmetered store."""
    from engine.methods.arg.generation import demo_pool

    bi, scorer, schema = retrieval_models(config)
    chosen = models.questions
    pool: list[Demo] = []
    if config.demonstrations and chosen is not None and chosen.split != "train":
        train = replace(chosen, split="train", sample=config.pool, limit=None).select()
        pool = demo_pool(store, gold_items(store, train), gold_items(store, chosen.select()))
    return ArgMethod(store, models, config, models.lm(config.model, config.prompt_template), bi, scorer, pool,
                     schema=schema, seed=chosen.seed if chosen is not None else 0)


def gold_items(store: Store, questions: Sequence[Question]) -> list[tuple[Question, str]]:
    """(question, gold form with ids) for each question that has one: a question without a gold
    path or topic entity gives no demonstration and no training sample (the export counts it)."""
    items = []
    for q in questions:
        try:
            items.append((q, gold_form(store, q)))
        except InvalidInputError:
            continue
    return items


def training_samples(store: Store, questions: Sequence[Question], config: ArgConfig) -> list[Sample]:
    """The generator's samples: the inference prompt without demonstrations (the question and
    its top-k references, as a run with ``n_demos=0`` builds it) → the gold form, ids as names."""
    from engine.methods.arg.datasets import generator_samples

    bi, scorer, schema = retrieval_models(config)
    return generator_samples(store, gold_items(store, list(questions)), bi, scorer, config.references, schema)
