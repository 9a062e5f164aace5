"""Every scoring convention of the KGQA field over one predictions file (``kgqa eval``).

Papers report "Hits@1" and "F1" under different rules, so a number means little without its
convention. :func:`score` computes them all, per set, hop count and question type, each with
a 95 % percentile-bootstrap interval:

| key | convention | used by | definition, per question (the metric is the mean over questions) |
|---|---|---|---|
| ``hits1`` | Hits@1, first answer | LDR (Eq. 13), EtD, this engine's tables | the first predicted answer is a gold answer |
| ``hits1_any`` | Hits@1, any answer | LDR's Eq. 14 (the variant it says RoG reported) | some predicted answer is a gold answer |
| ``rog_hit`` | RoG's Hit | RoG, and works that reuse its ``evaluate_results.py`` | a gold name, normalised, is a substring of the prediction's lines joined by spaces and normalised |
| ``gnn_rag_hit1`` | GNN-RAG's Hit1 | GNN-RAG (its LLM evaluator) | a gold name, normalised, is a substring of the normalised first line of the prediction |
| ``tog_em`` | ToG's lenient exact match | ToG (``eval/utils.py``) | the answer in the first ``{…}`` (or the whole text), lowercased without spaces, equals, contains or is contained in a gold answer treated alike |
| ``webqsp_f1`` | WebQSP's official F1 | the WebQSP dataset's ``eval.py``; semantic-parsing papers (ARG-KBQA) | F1 of the predicted ids against each gold parse's ids; the best parse counts |
| ``macro_f1`` | mean per-question F1 | GNN retrievers' evaluators (GNN-RAG's ``gnn/evaluate.py``); RoG's evaluator averages it too, with its own precision (``--protocol rog``) | F1 of the question's precision and recall |
| ``answer_f1`` | answer-set F1 | LDR (Appendix C, which calls it Macro-F1); WebQSP's "F1 of average recall and average precision" | the harmonic mean of the mean precision and the mean recall (not a mean over questions) |

``precision`` and ``recall`` (means over questions) come with them. ``kgqa eval FILE`` prints
every convention; ``--protocol hits1|rog|gnn-rag|tog|webqsp`` one of them (``rog`` also prints
RoG's evaluator's own line: Hit, Accuracy, F1, Precision, Recall); ``--json`` the form below;
``--bootstrap N`` and ``--seed S`` set the intervals. "Normalised" is RoG's
normalisation (:func:`engine.methods.metrics.normalize`: lowercase, no punctuation, no
articles, single spaces).

What each reads of a record (one JSON line: ``answers`` and ``prediction`` at least):
- ``hits1``, ``hits1_any``, ``precision``, ``recall``, ``macro_f1`` and ``answer_f1`` compare distinct answers by
  id where the record has ``answer_ids`` and ``prediction_ids`` (``by="auto"``), else by
  normalised name (``match="exact"``: equal; ``"contains"``: a prediction containing the gold
  name), as :func:`engine.methods.metrics.evaluate` does;
- ``rog_hit``, ``gnn_rag_hit1`` and ``tog_em`` read text as their evaluators do: a
  ``prediction`` that is a string is an LLM's output (RoG splits it into lines, GNN-RAG takes
  its first line, ToG its first ``{…}``); a list is answers best first (RoG keeps each distinct
  answer once, GNN-RAG takes the first, ToG reads them joined by ", "). They compare
  ``answers`` (or, where a record's gold is ids only, ``answer_ids`` against ``prediction_ids``).
  One departure, the same in all three: a gold answer or a response that normalises to
  nothing never matches (their code finds the empty string in any text);
- ``webqsp_f1`` compares ids exactly, each entry counting (a repeated wrong prediction is two
  false positives), against the record's ``parses`` (a list of lists of gold ids; an empty
  parse scores 1 only when nothing is predicted) or else its ``answer_ids``; where a record has
  no ids on one side it compares normalised names.

A record whose ``answers`` (and ``answer_ids``) hold nothing to match is counted under
``no_gold`` and scored by no convention (RoG's and GNN-RAG's evaluators cannot score it;
WebQSP's scores such a question 1 when nothing is predicted). Groups: the record's ``set`` (or
``dataset``) field, else one set; within it ``overall``, ``hops`` and ``qtype``.

Intervals: ``bootstrap`` resamples (default 1,000, at most
:data:`engine.methods.metrics.MAX_BOOTSTRAP` = 100,000; 0: none) of the group's questions with
replacement, drawn by ``numpy.random.default_rng(seed)``; each metric's 2.5th and 97.5th
percentiles over the resamples. The same records, settings and seed give the same interval.

:meth:`Report.to_json` (``kgqa eval --json``), the form results files store::

    {"match": "exact", "by": "auto",
     "bootstrap": {"resamples": 1000, "seed": 0, "confidence": 0.95},
     "sets": {"<set>": {"overall": GROUP, "hops": {"1": GROUP, …}, "qtype": {"<type>": GROUP, …}}}}
    GROUP = {"questions": 100, "no_gold": 0,
             "metrics": {"hits1": {"value": 0.97, "low": 0.93, "high": 1.0}, …every key above…}}

Numbers are rounded to 6 places; ``low``/``high`` are null without resamples, every number is
null in a group with no scored question. :meth:`Report.from_json` reads it back.
"""
from engine.methods.scoring.report import (
    CONFIDENCE,
    LABELS,
    METRICS,
    PROTOCOLS,
    TABLE_METRICS,
    Estimate,
    GroupScores,
    Report,
    SetScores,
    format_scores,
    question_row,
    score,
)

__all__ = [
    "CONFIDENCE", "LABELS", "METRICS", "PROTOCOLS", "TABLE_METRICS", "Estimate", "GroupScores", "Report", "SetScores",
    "format_scores", "question_row", "score",
]
