"""Option scoring (LDR Eq. 7–9): the argmax of P(option | prompt) over a pool.

With a local model (``logprobs``) every option is scored in one call, :meth:`score_batch`:
batched forward passes that compute the prompt once. An option's score is the
log-probability of its tokens *and the end-of-sequence token after them* (the probability of
the option as the whole answer, so an option never wins by being a prefix of another),
summed by default: the exact Eq. 7 argmax, the option the model gives the most probability.
``normalise="mean"`` divides by the tokens (what transformers' beam search, the paper's
"constrained beam search" with length penalty 1, ranks finished sequences by); it favours
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
from engine.methods.lockstep import Choice
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
        if not options:
            raise ValueError("an empty option pool has nothing to choose")
        if len(options) == 1:
            return Choice(0)
        if self.mode != "choice":
            try:
                logprobs = self.lm.score_batch(prompt, options, eos=True)
            except UnsupportedOperationError:
                self.mode = "choice"
            else:
                self.mode = "logprobs"
                scores = [sum(lp) / len(lp) if self.normalise == "mean" else sum(lp) for lp in logprobs]
                best = max(range(len(scores)), key=lambda i: (scores[i], -i))
                return Choice(best, scores)
        return Choice(match_option(self.lm.generate(prompt, max_new_tokens=self.choice_tokens).text, options))


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
        return (self.search if stage_of(prompt) == "search" else self.reasoner)(prompt, options)
