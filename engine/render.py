"""Readable text for results: paths as ``e0 → r1 → e1``, tables of rows."""
from __future__ import annotations

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
        return f"{term.value}\t{kind}"
    name = names.get(term) if names else None
    return f"{term}\t{name}" if name and name != term else term


def render_path(path: Path, names: Mapping[str, str | None] | None = None) -> str:
    """``e0 → r1 → e1 → …``; a hop walked against the stored direction reads ``e0 ← r1 ← e1``."""
    parts = [term_text(path.nodes[0], names)]
    for i, relation in enumerate(path.relations):
        arrow = "→" if path.forward[i] else "←"
        parts.append(f"{arrow} {relation} {arrow} {term_text(path.nodes[i + 1], names)}")
    return " ".join(parts)


def render(result: object, names: Mapping[str, str | None] | None = None) -> str:
    """Any operation's result as lines of text."""
    if isinstance(result, PathsResult):
        lines = [render_path(p, names) for p in result.paths]
    elif isinstance(result, ExpandResult):
        lines = [
            f"{term_text(e.src, names)} {'→' if e.forward else '←'} {e.relation} {'→' if e.forward else '←'} "
            f"{term_text(e.dst, names)}"
            for e in result.edges
        ]
    elif isinstance(result, RelationsResult):
        lines = [f"{term_text(r.id, names)}\t{r.direction}\t{r.relation}\t{r.count}" for r in result.rows]
    elif isinstance(result, TwoHopResult):
        lines = [f"{term_text(r.id, names)}\t{r.r1}\t{r.direction}\t{r.relation}\t{r.count}" for r in result.rows]
    elif isinstance(result, SubgraphResult):
        lines = [f"{term_text(t.subject, names)}\t{t.relation}\t{term_text(t.object, names)}" for t in result.edges]
    elif isinstance(result, SearchResult):
        lines = [f"{h.id}\t{h.name}" for h in result.hits]
    elif isinstance(result, ExecuteResult):
        lines = [f"count\t{result.count}"] if result.count is not None else [_answer(a, names) for a in result.answers]
    elif isinstance(result, QueryResult):
        lines = ["\t".join(result.columns)] + ["\t".join(str(v) for v in row) for row in result.rows]
    elif isinstance(result, StoreStats):
        lines = [f"triples\t{result.triples}", f"entities\t{result.entities}"]
        lines += [f"{rel}\t{n}" for rel, n in sorted(result.relations.items(), key=lambda kv: (-kv[1], kv[0]))]
    elif isinstance(result, Mapping):
        lines = [f"{k}\t{v if not isinstance(v, list) else ', '.join(map(str, v))}" for k, v in result.items()]
    else:
        lines = [str(result)]
    if getattr(result, "truncated", False):
        lines.append("… (truncated at the limit)")
    return "\n".join(lines) if lines else "(nothing)"
