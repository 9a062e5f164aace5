"""Readable text for results: paths as ``e0 → r1 → e1``, tables of rows.

:func:`render` writes what the store holds with its control characters escaped
(:func:`escaped`), so that a name cannot break a tab-separated row or drive the terminal;
``--json`` output is the exact text.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from engine.graph import Literal, Path, Term
from engine.results import (
    ExecuteResult,
    ExpandResult,
    PathsResult,
    QueryResult,
    RelationsResult,
    SearchResult,
    StoreStats,
    SubgraphResult,
    TwoHopResult,
)


# C0 and C1 control characters, DEL, and the Unicode line and paragraph separators
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escaped(text: str) -> str:
    """``text`` for a line of text output: a newline, carriage return or tab written as ``\\n``,
    ``\\r``, ``\\t``, any other control character as ``\\xNN`` (``\\x1b`` for ESC), and U+2028 /
    U+2029 as ``\\u2028`` / ``\\u2029``; everything else, backslashes included, as it is."""
    return _CONTROL.sub(_escape, text)


def term_text(term: Term, names: Mapping[str, str | None] | None = None) -> str:
    """A node as text: its name when known, else its id; literals as their value."""
    if isinstance(term, Literal):
        return term.value
    if names and names.get(term):
        return str(names[term])
    return term


def _answer(term: Term, names: Mapping[str, str | None] | None) -> str:
    """An answer as a row: an entity's id (and name when known); a literal's value and type."""
    if isinstance(term, Literal):
        kind = term.datatype.rsplit("#", 1)[-1] if term.datatype else (f"@{term.lang}" if term.lang else "string")
        return text_row(term.value, kind)
    name = names.get(term) if names else None
    return text_row(term, name) if name and name != term else escaped(term)


def text_row(*fields: object) -> str:
    """Fields as a tab-separated row, each escaped; None (a query's unbound value, an id with
    no name) as an empty field, never the text ``None``."""
    return "\t".join("" if field is None else escaped(str(field)) for field in fields)


def render_path(path: Path, names: Mapping[str, str | None] | None = None) -> str:
    """``e0 → r1 → e1 → …``; a hop walked against the stored direction reads ``e0 ← r1 ← e1``."""
    parts = [term_text(path.nodes[0], names)]
    for i, relation in enumerate(path.relations):
        arrow = "→" if path.forward[i] else "←"
        parts.append(f"{arrow} {relation} {arrow} {term_text(path.nodes[i + 1], names)}")
    return " ".join(parts)


def render(result: object, names: Mapping[str, str | None] | None = None) -> str:
    """Any operation's result as lines of text, what the store holds escaped (:func:`escaped`)."""
    if isinstance(result, PathsResult):
        lines = [escaped(render_path(p, names)) for p in result.paths]
    elif isinstance(result, ExpandResult):
        lines = [
            escaped(f"{term_text(e.src, names)} {'→' if e.forward else '←'} {e.relation} {'→' if e.forward else '←'} "
                    f"{term_text(e.dst, names)}")
            for e in result.edges
        ]
    elif isinstance(result, RelationsResult):
        lines = [text_row(term_text(r.id, names), r.direction, r.relation, r.count) for r in result.rows]
    elif isinstance(result, TwoHopResult):
        lines = [text_row(term_text(r.id, names), r.r1, r.direction, r.relation, r.count) for r in result.rows]
    elif isinstance(result, SubgraphResult):
        lines = [text_row(term_text(t.subject, names), t.relation, term_text(t.object, names)) for t in result.edges]
    elif isinstance(result, SearchResult):
        lines = [text_row(h.id, h.name) for h in result.hits]
    elif isinstance(result, ExecuteResult):
        lines = [f"count\t{result.count}"] if result.count is not None else [_answer(a, names) for a in result.answers]
    elif isinstance(result, QueryResult):
        lines = [text_row(*result.columns)] + [text_row(*row) for row in result.rows]
    elif isinstance(result, StoreStats):
        lines = [f"triples\t{result.triples}", f"entities\t{result.entities}"]
        lines += [text_row(rel, n) for rel, n in sorted(result.relations.items(), key=lambda kv: (-kv[1], kv[0]))]
    elif isinstance(result, Mapping):
        lines = [text_row(k, v if not isinstance(v, list) else ', '.join(map(str, v))) for k, v in result.items()]
    else:
        lines = [escaped(str(result))]
    if getattr(result, "truncated", False):
        lines.append("… (truncated at the limit)")
    return "\n".join(lines) if lines else "(nothing)"
