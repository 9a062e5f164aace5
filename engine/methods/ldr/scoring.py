"""Option scoring (LDR Eq. 7–9): the argmax of P(option | prompt) over a pool.

With a local model (``logprobs``) the options of a pool are scored in one call,
:meth:`score_batch`: batched forward passes that compute the prompt once; the pools of a round
of lock-step decisions in one :meth:`score_many` call (:meth:`OptionScorer.decide`), which
runs prompts that begin alike together. An option's score is the log-probability of its tokens
*and the end-of-sequence token after them* (the probability of the option as the whole
answer, so an option never wins by being a prefix of another), summed by default: the exact
Eq. 7 argmax, the option the model gives the most probability. ``normalise="mean"`` divides
by the tokens (what transformers' beam search, the paper's "constrained beam search" with
length penalty 1, ranks finished sequences by); it favours
long options whose later tokens are near-certain (``entity_1+has_genre`` after ``entity_1+``)
over the two-token ``None``, so a trained model kept searching past the answer: on 20
validation questions of MetaQA-1hop, Hits@1 0.50 with the mean against 0.75 with the sum
(2-hop: 0.70 both).
Ties go to the earlier option. A pool of one option is chosen without asking the model.

A model that cannot score given text (an OpenAI-compatible chat endpoint) falls back to
``choice``: greedy generation with the same prompt, matched to an option (equal text, else
the longest option the answer starts with, else the longest it contains, else the last
option, which is the stop option of search and pruning). ``mode`` says which was used.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.errors import InvalidInputError, UnsupportedOperationError
from engine.methods.lockstep import Choice, Decide
from engine.methods.ldr.prompts import stage_of
from engine.models.lm import LanguageModel

NORMALISATIONS = ("mean", "sum")


class OptionScorer:
    """A :data:`engine.methods.ldr.search.Chooser` over a language model."""

    def __init__(self, lm: LanguageModel, normalise: str = "sum", choice_tokens: int = 32) -> None:
        if normalise not in NORMALISATIONS:
            raise InvalidInputError(f"unknown score normalisation {normalise!r}: use {' or '.join(NORMALISATIONS)}")
        self.lm, self.normalise, self.choice_tokens = lm, normalise, choice_tokens
        self.mode: str | None = None  # logprobs or choice, once known

    def __call__(self, prompt: str, options: Sequence[str]) -> Choice:
        return self.decide([Decide(prompt, tuple(options))])[0]

    def decide(self, asks: Sequence[Decide]) -> list[Choice]:
        """The choices of a round's decisions (a lock-step :data:`Decider`): every pool of two
        or more options scored in one :meth:`score_many` call, which runs prompts that begin
        alike together."""
        if any(not a.options for a in asks):
            raise ValueError("an empty option pool has nothing to choose")
        choices: list[Choice | None] = [Choice(0) if len(a.options) == 1 else None for a in asks]
        asked = [i for i, c in enumerate(choices) if c is None]
        if asked and self.mode != "choice":
            try:
                logprobs = self.lm.score_many([(asks[i].prompt, asks[i].options) for i in asked], eos=True)
            except UnsupportedOperationError:
                self.mode = "choice"
            else:
                self.mode = "logprobs"
                for i, lps in zip(asked, logprobs, strict=True):
                    scores = [sum(lp) / len(lp) if self.normalise == "mean" else sum(lp) for lp in lps]
                    choices[i] = Choice(max(range(len(scores)), key=lambda j: (scores[j], -j)), scores)
                return choices  # type: ignore[return-value]
        if asked:
            answers = self.lm.generate_batch([asks[i].prompt for i in asked], max_new_tokens=self.choice_tokens)
            for i, answer in zip(asked, answers, strict=True):
                choices[i] = Choice(match_option(answer.text, asks[i].options))
        return choices  # type: ignore[return-value]


def match_option(text: str, options: Sequence[str]) -> int:
    """The option a generated answer names (see the module doc)."""
    answer = text.strip().strip("'\"").strip().casefold()
    folded = [o.casefold() for o in options]
    if answer in folded:
        return folded.index(answer)
    for test in (answer.startswith, answer.__contains__):
        hits = [i for i, o in enumerate(folded) if o and test(o)]
        if hits:
            return max(hits, key=lambda i: (len(folded[i]), -i))
    return len(options) - 1


class StageScorer:
    """Two choosers, as the paper's two models: ``search`` for stage 1, ``reasoner`` for
    pruning and answer location."""

    def __init__(self, search: OptionScorer, reasoner: OptionScorer) -> None:
        self.search, self.reasoner = search, reasoner

    @property
    def mode(self) -> str | None:
        return self.search.mode or self.reasoner.mode

    def __call__(self, prompt: str, options: Sequence[str]) -> Choice:
        return self.decide([Decide(prompt, tuple(options))])[0]

    def decide(self, asks: Sequence[Decide]) -> list[Choice]:
        """A round's decisions, each stage's by its model (:meth:`OptionScorer.decide`)."""
        choices: list[Choice | None] = [None] * len(asks)
        searching = [stage_of(a.prompt) == "search" for a in asks]
        for scorer, stage in ((self.search, True), (self.reasoner, False)):
            members = [i for i, s in enumerate(searching) if s == stage]
            if members:
                for i, choice in zip(members, scorer.decide([asks[i] for i in members]), strict=True):
                    choices[i] = choice
        return choices  # type: ignore[return-value]
