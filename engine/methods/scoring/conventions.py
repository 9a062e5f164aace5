"""Each published evaluator's rule for one question: what it reads of the prediction and how it
matches a gold answer (the table in :mod:`engine.methods.scoring` says who uses which)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.errors import InvalidInputError
from engine.methods.metrics import Substrings, normalize, rog_question

#: a prediction as records carry it: answers best first, or one free text (an LLM's output)
Prediction = Sequence[Any] | str | None


def rog_hit(prediction: Prediction, answers: Sequence[Any]) -> float:
    """RoG's Hit: 1.0 when a gold answer, normalised, is a substring of the prediction's lines
    (RoG's reading, :func:`engine.methods.metrics.rog_lines`) joined and normalised."""
    return rog_question(prediction, answers).hit


def gnn_rag_hit1(prediction: Prediction, answers: Sequence[Any]) -> float:
    """GNN-RAG's Hit1 (its ``evaluate_results.py``): 1.0 when a gold answer, normalised, is a
    substring of the normalised first line of the prediction text (stripped first, so leading
    blank lines do not count); of a list, its first answer."""
    if isinstance(prediction, str):
        first = prediction.strip().split("\n")[0]
    else:
        first = str(prediction[0]) if prediction else ""
    line = normalize(first)
    return float(any(g and g in line for g in map(normalize, answers)))


def _tog_clean(text: str) -> str:
    return text.strip().replace(" ", "").lower()


def tog_response(prediction: Prediction) -> str:
    """The answer ToG's evaluator reads: a list of answers is one text, joined by ", " (as an
    LLM lists several answers); a text with a "{" gives what follows the first "{" up to the
    first "}", sliced as ToG slices it (with no "}" the last character is dropped; a "}"
    before the "{" leaves nothing); any other text is read whole."""
    text = prediction if isinstance(prediction, str) else ", ".join(str(p) for p in prediction or [])
    if "{" not in text:
        return text
    return text[text.index("{") + 1 : text.find("}")]


def tog_em(prediction: Prediction, answers: Sequence[Any]) -> float:
    """ToG's lenient exact match (its ``eval/utils.py``): the response and each gold answer,
    stripped, lowercased and without spaces, match when they are equal or one contains the
    other. An empty response or gold answer never matches (ToG's code finds the empty string
    in every answer, so it would count an empty response as right)."""
    response = _tog_clean(tog_response(prediction))
    if not response:
        return 0.0
    gold = [_tog_clean(str(a)) for a in answers]
    # a gold answer in the response: one pass over it for all of them (a response can be long)
    return float(any(g and response in g for g in gold) or Substrings(gold).scan(response, set()))


def webqsp_f1(predicted: Sequence[str], parses: Sequence[Sequence[str]]) -> float:
    """WebQSP's official F1 (the dataset's ``eval.py``) of one question: per parse, true
    positives are the parse's answers found among the predictions, false positives the
    predictions not among the parse's answers (each entry counts, repeats included), F1 from
    those; the question's F1 is the best over its parses. A parse without answers scores 1.0
    when nothing is predicted, else 0.0."""
    if not parses:
        raise InvalidInputError("WebQSP F1 needs at least one gold parse")

    predicted_set = set(predicted)

    def f1(gold: Sequence[str]) -> float:
        if not gold or not predicted:
            return float(not gold and not predicted)
        gold_set = set(gold)
        tp = sum(g in predicted_set for g in gold)
        fp = sum(p not in gold_set for p in predicted)
        return 2 * tp / (2 * tp + fp + len(gold) - tp) if tp else 0.0

    return max(f1(p) for p in parses)
