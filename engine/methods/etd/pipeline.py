"""EtD end to end on the method-run protocol (:mod:`engine.methods.run`): exploration, evidence,
determination (the batch's prompts decoded together), a batch of questions at a time."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.methods.etd.determination import Determination, determine
from engine.methods.etd.evidence import backtrack, facts
from engine.methods.etd.exploration import Explorer, RelationVocab
from engine.methods.etd.model import EtDModel, encode_texts, ranked
from engine.methods.etd.prompts import LABELS, Option, render_prompt
from engine.methods.etd.training import explore, peak_memory_mb, question_texts
from engine.graph import Literal
from engine.methods.metrics import aggregate, score_question
from engine.models.lm import LanguageModel
from engine.methods.etd.config import EtdConfig
from engine.methods.spec import Method, Models, Prediction, empty_reply
from engine.errors import InvalidInputError
from engine.store import Store
from loaders.questions import Question


def _text(term: Any, names: dict[str, str | None]) -> str:
    return term.value if isinstance(term, Literal) else (names.get(term) or term)


@dataclass(frozen=True)
class CandidateTrace:
    """One of the top-N candidates: its id and name, the GNN's probability, and the evidence
    facts backtracked for it (names shown)."""

    id: str
    name: str
    probability: float
    evidence: list[list[str]]


@dataclass(frozen=True)
class EtdTrace:
    """How EtD answered a question with the GNN alone: its candidates and its top one."""

    candidates: list[CandidateTrace]
    gnn_answer: str | None


@dataclass(frozen=True)
class DeterminedTrace(EtdTrace):
    """EtD with the language model's determination: the label it chose (None when its reply
    named no option) and its reply."""

    label: str | None
    llm_output: str | None


class EtdMethod(Method):
    """Explore with the trained GNN, backtrack evidence for the top-N candidates and determine
    each question's answer (by ``lm`` when given, else the GNN's top candidate)."""

    name = "etd"

    def __init__(
        self, store: Store, models: Models, config: EtdConfig, model: EtDModel, lm: LanguageModel | None = None,
        *, max_degree: int | None = 1000,
    ) -> None:
        super().__init__(store, models, config.batch_size)
        model.eval()
        self.model, self.lm, self.config = model, lm, config
        self.top_n, self.encoding_cache = config.top_n, config.encoding_cache
        self.explorer = Explorer(self.store, RelationVocab(list(model.config.relations)), max_degree=max_degree)

    def _answer(self, questions: list[Question]) -> list[Prediction]:
        explorer, n = self.explorer, len(questions)
        with self.meter.stage("model"), torch.no_grad():
            features = encode_texts(
                question_texts(questions, self.model.config.mask_topic), self.model.config.encoder, cache_dir=self.encoding_cache
            )
            exploration = explore(self.model, explorer, questions, features, range(n))
            top = ranked(exploration, n, self.top_n)
            evidence = [[facts(backtrack(exploration, int(exploration.keys[c])), explorer) for c, _, _ in t] for t in top]
        ids = {explorer.terms[node] for t in top for _, node, _ in t} | {
            term for per_q in evidence for fs in per_q for f in fs for term in (f.subject, f.object)
        }
        names = self.store.names(sorted(i for i in ids if isinstance(i, str)))
        terms = self.explorer.terms
        options = [
            [Option(_text(terms[node], names), p, tuple(f)) for (_, node, p), f in zip(cands, cand_facts)]
            for cands, cand_facts in zip(top, evidence)
        ]
        asked = [i for i, opts in enumerate(options) if opts] if self.lm is not None else []
        found = determine(
            self.lm, [render_prompt(questions[i].question, options[i], names) for i in asked], [[o.text for o in options[i]] for i in asked]
        ) if asked else []
        choices = dict(zip(asked, found, strict=True))
        return [self._prediction(cands, opts, names, choices.get(i)) for i, (cands, opts) in enumerate(zip(top, options))]

    def _prediction(self, cands: list, options: list[Option], names: dict[str, str | None], choice: Determination | None) -> Prediction:
        """The GNN's top candidate, or the option the LLM chose (``choice``), with the evidence."""
        terms = self.explorer.terms
        candidates = [
            CandidateTrace(
                str(terms[node]), o.text, round(p, 6), [[_text(f.subject, names), f.relation, _text(f.object, names)] for f in o.facts]
            )
            for (_, node, p), o in zip(cands, options)
        ]
        gnn_answer = str(terms[cands[0][1]]) if cands else None
        chosen: int | None = 0 if cands else None
        answer_text: str | None = None
        trace: EtdTrace = EtdTrace(candidates, gnn_answer)
        if choice is not None:
            chosen, answer_text = choice.index, choice.answer
            trace = DeterminedTrace(candidates, gnn_answer, None if choice.index is None else LABELS[choice.index], choice.output)
        if chosen is not None:
            return Prediction([options[chosen].text], [str(terms[cands[chosen][1]])], trace)
        # the LLM named an answer that is none of the options: its text, no id
        if answer_text:
            return Prediction([answer_text], [], trace)
        why = "the GNN found no candidate" if choice is None else empty_reply("the language model", choice.output, "names no option")
        return Prediction([], [], trace, why)

    def summary(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Hits@1 of the GNN's top candidate alone, the device and the peak memory."""
        scored = [
            score_question([r["etd"]["gnn_answer"]] if r["etd"]["gnn_answer"] else [], list(dict.fromkeys([*r["answer_ids"], *r["answers"]])))
            for r in records
            if r["answers"] or r["answer_ids"]
        ]
        device = str(self.model.relation_features.device)
        return {"hits1_gnn": round(aggregate(scored).hits1, 5), "device": device, "peak_memory_mb": peak_memory_mb()}


def build(config: EtdConfig, store: Store, models: Models) -> EtdMethod:
    """EtD as its config names it: the checkpoint's GNN (refused where the run's questions are
    not held out from its training split) and, unless ``gnn_only``, the language model."""
    from engine.methods.etd.training import load_checkpoint

    if not config.checkpoint:
        raise InvalidInputError("EtD needs a trained GNN: give --checkpoint best.pt (written by `kgqa etd train`)")
    model, saved = load_checkpoint(config.checkpoint, models.device)
    settings = saved["train"]
    split_seed = settings.get("split_seed", settings["seed"])  # checkpoints from before --split-seed split with --seed
    chosen = models.questions
    if chosen is not None and chosen.split != "all" and (split_seed, settings["val_fraction"], settings["test_fraction"]) != (
        chosen.split_seed, 0.1, 0.1
    ):
        raise InvalidInputError(
            f"{config.checkpoint} was trained on a split with seed {split_seed} and val/test fractions "
            f"{settings['val_fraction']}/{settings['test_fraction']}: run with --split-seed {split_seed} (and the default "
            "fractions) so that --split picks questions it was not trained on"
        )
    max_degree = settings["max_degree"] if config.max_degree is None else config.max_degree
    lm = None if config.gnn_only else models.lm(config.model, config.prompt_template)
    return EtdMethod(store, models, config, model, lm, max_degree=max_degree)
