"""Question readers: RoG files (JSONL or parquet), MetaQA (``qa_*.txt`` with question types)
and PathQuestion. Datasets are expected to be well formed, so a bad line raises
:class:`~engine.errors.ParseError` instead of being skipped."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidInputError, ParseError, clipped
from engine.identifiers import check_list, validate_text
from loaders.source import Reject, Source
from loaders.tabular import ROG_COLUMNS, rog_rows


@dataclass
class Question:
    """One dataset question with its gold answers.

    ``answers`` are the answer strings as the dataset gives them; ``answer_entities`` the
    answer node ids where the dataset names them. ``path`` is a gold relation path where
    the dataset has one (relation names only: the WebQSP slice over FB15k-237 walks some
    hops against their stored direction, as its gold S-expression ``sexpr`` says);
    ``qtype`` a question type (MetaQA; the slice's shape).
    """

    id: str
    question: str
    answers: list[str]
    topic_entities: list[str]
    answer_entities: list[str]
    hops: int | None = None
    qtype: str | None = None
    path: list[str] | None = None
    path_entities: list[str] | None = None  # the entities along ``path`` (PathQuestion), topic first
    sexpr: str | None = None  # the gold logical form (S-expression with ids) where the dataset gives one
    path_forward: list[bool] | None = None  # per hop of ``path``: walked in the stored direction (the WebQSP slice)

    def __post_init__(self) -> None:
        # a str given for a list would be taken character by character (each letter a topic entity);
        # a value of another kind would be written as its repr ("None") or fail once a run is done
        for name in ("id", "question"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidInputError(f"a Question's {name} must be a string, got {clipped(repr(value), 200)}")
            validate_text(value, f"the {name} of a question")
        which = clipped(repr(self.id), 100)
        for name in ("answers", "topic_entities", "answer_entities", "path", "path_entities", "path_forward"):
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_LISTS:
                continue
            what = f"the {name} of question {which}"
            kind = bool if name == "path_forward" else str
            check_list(value, what, "booleans" if kind is bool else "strings")
            if not isinstance(value, list):  # a generator would be used up by the checks below
                value = list(value)
                setattr(self, name, value)
            for position, item in enumerate(value):
                if not isinstance(item, kind):
                    raise InvalidInputError(f"item {position} of {what} is {clipped(repr(item), 200)}: give "
                                            f"{'true or false' if kind is bool else 'a string'}")
                if kind is str:
                    validate_text(item, f"item {position} of {what}")
        if self.hops is not None and (isinstance(self.hops, bool) or not isinstance(self.hops, int)):
            raise InvalidInputError(f"the hops of question {which} must be a whole number, got {clipped(repr(self.hops), 200)}")
        for name in ("qtype", "sexpr"):
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, str):
                    raise InvalidInputError(f"the {name} of question {which} must be a string, got {clipped(repr(value), 200)}")
                validate_text(value, f"the {name} of question {which}")
        if self.path_forward is not None and len(self.path_forward) != len(self.path or ()):
            raise InvalidInputError(f"the path_forward of question {which} has {len(self.path_forward)} entries for "
                                    f"{len(self.path or ())} relations of its path: give one true or false per relation")


#: the list fields of a Question that may be None
_OPTIONAL_LISTS = ("path", "path_entities", "path_forward")


def _listed(row: dict, column: str) -> list | None:
    """A RoG column that holds a list: None when absent or null, one string as a list of it,
    whole and decimal numbers (a parquet column of years) as their text. Any other value is a
    :class:`ValueError` naming the column; the items' kinds are checked by :class:`Question`."""
    value = row.get(column)
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"'{column}' must be a list (or one string), got {clipped(repr(value), 200)}")
    return [str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else v for v in value]


def _row_id(row: dict, line: int) -> str:
    """A row's ``id``: a string, or a whole number as its text; its line number when it has none."""
    value = row.get("id")
    if value is None:
        return str(line)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"'id' must be a string or a whole number, got {clipped(repr(value), 200)}")
    return value


#: columns of a question file read when present
_OPTIONAL_COLUMNS = ("hops", "qtype", "path", "path_forward", "sexpr")


def read_rog_questions(path: str | os.PathLike[str]) -> list[Question]:
    """The questions of a RoG-style file (JSONL or parquet): id, question, answer,
    q_entity (topic entities), a_entity (answer entities), and where a row has them (the
    WebQSP slice over FB15k-237 does) hops, qtype, path, path_forward and sexpr. A row with a
    field of the wrong kind, or an id an earlier row has, is refused with its line."""
    questions: list[Question] = []
    first_line: dict[str, int] = {}
    with Source(path) as src:
        for item in rog_rows(src, (*ROG_COLUMNS[:5], *_OPTIONAL_COLUMNS)):
            if isinstance(item, Reject):
                raise ParseError(item.reason, source=str(path), line=item.line_no)
            n, _, row = item
            if not isinstance(row.get("question"), str):
                raise ParseError("row has no 'question' string", source=str(path), line=n)
            try:
                question = Question(
                    id=_row_id(row, n),
                    question=row["question"],
                    answers=_listed(row, "answer") or [],
                    topic_entities=_listed(row, "q_entity") or [],
                    answer_entities=_listed(row, "a_entity") or [],
                    hops=row.get("hops"),
                    qtype=row.get("qtype"),
                    path=_listed(row, "path"),
                    path_forward=row.get("path_forward"),
                    sexpr=row.get("sexpr"),
                )
            except (ValueError, InvalidInputError) as e:
                raise ParseError(str(e), source=str(path), line=n) from e
            if question.id in first_line:
                raise ParseError(f"question id {clipped(repr(question.id), 100)} comes twice (first on line "
                                 f"{first_line[question.id]}): give each question its own id", source=str(path), line=n)
            first_line[question.id] = n
            questions.append(question)
    return questions


# ---------------------------------------------------------------------------- MetaQA questions

#: MetaQA entity type -> the KB relation linking a movie to it (stored movie -> value)
METAQA_RELATIONS = {
    "actor": "starred_actors",
    "director": "directed_by",
    "writer": "written_by",
    "genre": "has_genre",
    "language": "in_language",
    "year": "release_year",
    "tag": "has_tags",
    "tags": "has_tags",
    "imdbrating": "has_imdb_rating",
    "imdbvotes": "has_imdb_votes",
}


def metaqa_relation_path(qtype: str) -> list[tuple[str, str]]:
    """(relation, direction) per hop of a MetaQA question type, walking from the topic entity.

    ``actor_to_movie_to_director`` → ``[("starred_actors", "in"), ("directed_by", "out")]``:
    every KB edge is stored movie → value, so a hop into a movie goes ``in`` and a hop out
    of one goes ``out``.
    """
    kinds = qtype.split("_to_")
    hops: list[tuple[str, str]] = []
    for here, there in zip(kinds, kinds[1:]):
        if here == "movie" and there in METAQA_RELATIONS:
            hops.append((METAQA_RELATIONS[there], "out"))
        elif there == "movie" and here in METAQA_RELATIONS:
            hops.append((METAQA_RELATIONS[here], "in"))
        else:
            raise InvalidInputError(
                f"unknown MetaQA question type {qtype!r}: expected kinds joined by '_to_' with every "
                f"hop to or from 'movie', kinds being movie, {', '.join(METAQA_RELATIONS)}"
            )
    if not hops:
        raise InvalidInputError(f"unknown MetaQA question type {qtype!r}: no hop")
    return hops


Hop = tuple[str, bool]  # relation, walked in the stored direction


def gold_hops(q: Question) -> list[Hop] | None:
    """The hops of a question's gold path from its topic entity, as (relation, forward):
    its annotated path (PathQuestion's run in the stored direction; the WebQSP slice says per
    hop in ``path_forward``), else the path a MetaQA question type implies; None when the
    dataset gives neither. The path comes first: the slice also names its shape as ``qtype``."""
    if q.path:
        return list(zip(q.path, q.path_forward or [True] * len(q.path), strict=True))
    if q.qtype:
        return [(relation, direction == "out") for relation, direction in metaqa_relation_path(q.qtype)]
    return None


def gold_relation_path(q: Question) -> list[str] | None:
    """The relations of :func:`gold_hops`."""
    hops = gold_hops(q)
    return None if hops is None else [relation for relation, _ in hops]


_HOP_DIR = re.compile(r"(\d+)-hop")


def read_metaqa_questions(qa_path: str | os.PathLike[str], qtype_path: str | os.PathLike[str] | None = None) -> list[Question]:
    """MetaQA questions: ``question<TAB>answer1|answer2…`` with the topic entity in [brackets].

    The question text is kept as given (brackets included). ``qtype_path`` gives one type
    per line in the same order; by default ``<stem>_qtype.txt`` beside ``qa_path`` is used
    when it exists. ``hops`` comes from the qtype, else from a ``N-hop`` directory name.
    """
    qa = Path(qa_path)
    if qtype_path is None:
        beside = qa.with_name(qa.name.split(".")[0] + "_qtype.txt")
        qtype_path = beside if beside.is_file() else None
    qtypes = text_lines(Path(qtype_path)) if qtype_path is not None else None
    dir_hops = _HOP_DIR.fullmatch(qa.parent.name)
    questions: list[Question] = []
    lines = text_lines(qa)
    if qtypes is not None and len(qtypes) != len(lines):
        raise ParseError(
            f"{len(lines)} questions but {len(qtypes)} question types in {str(qtype_path)!r}; the files must align",
            source=str(qa_path),
        )
    prefix = f"{qa.parent.name}/{qa.name.split('.')[0]}"
    for n, line in enumerate(lines, 1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ParseError(f"expected question<TAB>answers with the topic entity in [brackets], found {len(fields)} "
                             "tab-separated field(s)", source=str(qa_path), line=n)
        text, answer_field = fields
        try:
            topic = _bracketed_topic(text)
        except ValueError as e:
            raise ParseError(str(e), source=str(qa_path), line=n) from e
        answers = [a for a in answer_field.split("|") if a]
        qtype = qtypes[n - 1] if qtypes is not None else None
        if qtype is not None:
            try:
                hops: int | None = len(metaqa_relation_path(qtype))
            except InvalidInputError as e:
                raise ParseError(str(e), source=str(qtype_path), line=n) from e
        else:
            hops = int(dir_hops.group(1)) if dir_hops else None
        questions.append(
            Question(
                id=f"{prefix}:{n}",
                question=text,
                answers=answers,
                topic_entities=[topic],
                answer_entities=list(answers),
                hops=hops,
                qtype=qtype,
            )
        )
    return questions


_BRACKET = re.compile(r"[\[\]]")


def _bracketed_topic(text: str) -> str:
    """The topic entity of a MetaQA question: the text of its one outermost ``[…]`` (brackets
    inside it are the entity's own: ``[[REC]]`` names ``[REC]``). A ValueError says why there is
    none: no brackets, unbalanced ones, an empty pair, or several entities."""
    how = "a MetaQA question names its topic entity in [brackets]"
    spans: list[str] = []
    depth = start = 0
    for bracket in _BRACKET.finditer(text):
        i, char = bracket.start(), bracket.group()
        if char == "[":
            if depth == 0:
                start = i + 1
            depth += 1
        elif char == "]":
            if depth == 0:
                raise ValueError(f"a ']' at character {i + 1} closes no '[': {how}")
            depth -= 1
            if depth == 0:
                spans.append(text[start:i])
    if depth:
        raise ValueError(f"a '[' is never closed: {how}")
    if not spans:
        raise ValueError(f"no [bracketed] topic entity: {how}")
    if len(spans) > 1:
        raise ValueError(f"{len(spans)} [bracketed] entities ({clipped(', '.join(spans), 200)}) where a MetaQA question "
                         "names one topic entity: give questions with several as a RoG .jsonl file, listed in q_entity")
    if not spans[0]:
        raise ValueError("an empty [] where the topic entity goes: name it inside the brackets")
    return spans[0]


def text_lines(path: Path) -> list[str]:
    """The lines of a small UTF-8 text file (gzip allowed), without a byte order mark, line
    endings (``\n``, ``\r\n`` or a lone ``\r``, as Python's text files read them) or a final
    empty line."""
    try:
        with Source(path) as src:
            raw = src.binary().read()
        data = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = raw.rfind(b"\n", 0, e.start) + 1
        raise ParseError(f"not UTF-8 text ({e.reason} at byte {e.start - line_start + 1} of the line): save the file as UTF-8",
                         source=str(path), line=raw.count(b"\n", 0, e.start) + 1) from e
    lines = data.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# ---------------------------------------------------------------------------- PathQuestion

def read_pathquestion(path: str | os.PathLike[str]) -> list[Question]:
    """PathQuestion (PQ-2H / PQ-3H) and PathQuestion-Large (PQL-2H, PQL-3H, PQL-3H_more):
    ``question<TAB>answer(alt1/alt2/…/)<TAB>path``.

    The answer field names the answer reached by the annotated path, then in parentheses
    every gold answer, each followed by ``/`` (names may hold parentheses themselves:
    ``PG_(USA)(PG_(USA)/)``). The path is ``topic#r1#e1#r2#…#answer#<end>#answer`` in PQ and
    ``topic#r1#e1#r2#…#answer`` in PQL, whose questions also start with a space (dropped here).
    ``answers`` (and ``answer_entities``) are the parenthesised gold answers; ``path`` the
    relations r1, r2, …; ``path_entities`` topic, e1, e2, ….
    """
    questions: list[Question] = []
    stem = Path(path).name.split(".")[0]
    for n, line in enumerate(text_lines(Path(path)), 1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise ParseError(f"expected question<TAB>answers<TAB>path, found {len(fields)} field(s)", source=str(path), line=n)
        text, answer_field, path_field = fields
        opening = _gold_answers_start(answer_field)
        if opening < 0:
            raise ParseError(f"answer field {answer_field!r} is not answer(alt1/alt2/…/)", source=str(path), line=n)
        answers = list(dict.fromkeys(a for a in answer_field[opening + 1:-1].split("/") if a)) or [answer_field[:opening]]
        steps = path_field.split("#")
        if len(steps) >= 5 and steps[-2] == "<end>":
            steps = steps[:-2]  # PQ repeats the answer after an <end> mark
        # topic, then (relation, entity) pairs
        if len(steps) < 3 or len(steps) % 2 == 0 or "<end>" in steps or not all(steps):
            raise ParseError(
                f"path {path_field!r} is neither topic#r1#e1#…#answer#<end>#answer (PQ) nor topic#r1#e1#…#answer (PQL)",
                source=str(path), line=n,
            )
        relations = steps[1::2]
        questions.append(
            Question(
                id=f"{stem}:{n}",
                question=text.strip(),
                answers=answers,
                topic_entities=[steps[0]],
                answer_entities=list(answers),
                hops=len(relations),
                path=relations,
                path_entities=steps[0::2],
            )
        )
    return questions


def _gold_answers_start(field: str) -> int:
    """Where the parenthesised gold answers of a PathQuestion answer field start: the ``(``
    that the field's final ``)`` closes; -1 when there is none."""
    if not field.endswith(")"):
        return -1
    depth = 0
    for i in range(len(field) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(field[i], 0)
        if depth == 0:
            return i
    return -1
