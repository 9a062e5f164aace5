"""How literals compare in S-expressions — the one definition all backends implement.

A literal has a *kind* and a *key* (a float):
- ``number`` (xsd:integer, int, long, decimal, float, double): the key is the value read as
  a double (``INF`` and ``-INF`` above and below every other); ``NaN`` has no key, so it
  satisfies no comparison, not even with itself, and ranks in no ARGMAX / ARGMIN;
- ``time`` (xsd:gYear, gYearMonth, date, dateTime): the key is
  ``year * 10000 + month * 100 + day + seconds / 100000`` where a coarser value stands for
  its first instant (``1990`` is 1990-01-01T00:00:00, ``1990-05`` is 1990-05-01), seconds are
  whole seconds of the day (fractions are dropped), timezones are ignored and negative years
  count back (``-0500``); so ``1990^^gYear`` and ``1990-01-01^^date`` are equal, and
  ``(lt r 1991^^gYear)`` keeps 1990-12-31;
- anything else has no key and satisfies no comparison.

``(lt r v)`` … compare keys of literals of ``v``'s kind only. ARGMAX / ARGMIN rank every
number or time value by its key (a relation is expected to hold one kind; mixed kinds
compare their keys as numbers). TC compares time keys only.
"""
from __future__ import annotations

from engine.graph import Literal
from engine.sexpr.tree import NOW, NOW_DATE, literal_kind

XSD_LOCAL_DATE_PARTS = {"gYear": 1, "gYearMonth": 2, "date": 3, "dateTime": 4}


def time_key(literal: Literal) -> float:
    """The key of a time literal (see the module docstring)."""
    text = literal.value
    negative = text.startswith("-")
    body = text[1:] if negative else text
    year_text = body.split("-")[0].split("Z")[0].split("+")[0]
    n = len(year_text)
    parts = XSD_LOCAL_DATE_PARTS[literal.datatype.rsplit("#", 1)[1]]  # type: ignore[union-attr]
    year = -int(year_text) if negative else int(year_text)
    month = int(body[n + 1:n + 3]) if parts >= 2 else 1
    day = int(body[n + 4:n + 6]) if parts >= 3 else 1
    seconds = (
        int(body[n + 7:n + 9]) * 3600 + int(body[n + 10:n + 12]) * 60 + int(body[n + 13:n + 15]) if parts == 4 else 0
    )
    return year * 10000 + month * 100 + day + seconds / 100000.0


def key(literal: Literal) -> float | None:
    """The comparison key of a number or time literal, else None."""
    kind = literal_kind(literal)
    if kind == "number":
        return None if literal.value == "NaN" else float(literal.value)
    if kind == "time":
        return time_key(literal)
    return None


def year_bounds(year: str) -> tuple[float, float]:
    """TC's interval for ``year`` (or ``NOW``): the keys of its first and last day."""
    if year == NOW:
        y, m, d = (int(p) for p in NOW_DATE.split("-"))
        point = float(y * 10000 + m * 100 + d)
        return point, point
    y = int(year)
    return float(y * 10000 + 101), float(y * 10000 + 1231)


#: end relation of a TC start relation, by suffix (WebQSP's from/to pairs)
END_SUFFIXES = ((".from", ".to"), (".from_date", ".to_date"), (".start_date", ".end_date"), ("_from", "_to"), (".start", ".end"))


def end_relation(start: str) -> str | None:
    """The relation holding the end of the interval that ``start`` opens, or None."""
    for head, tail in END_SUFFIXES:
        if start.endswith(head):
            return start[: -len(head)] + tail
    return None
