"""SPARQL expressions for the keys of literal values (``engine/sexpr/keys.py``): a number's
value, a date's instant, computed from each literal's lexical form so that every engine agrees.

:class:`LiteralKeys` is standard SPARQL; :class:`VirtuosoLiteralKeys` overrides what Virtuoso
evaluates differently. Both S-expressions (``sparql/sexpr.py``) and literal anchors
(``sparql/virtuoso.py``) use them; ``bind(value)`` writes a value as a query parameter.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.graph import SPECIAL_FLOATS, XSD, Literal
from engine.sexpr import keys
from engine.sexpr.tree import NUMERIC_TYPES, TEMPORAL_TYPES, literal_kind

Bind = Callable[[Any], str]


class LiteralKeys:
    def kind_test(self, var: str, kind: str | None) -> str:
        """True when ``var`` is a literal of ``kind`` (None: number or time) with a key (a NaN
        has none)."""
        types = {"number": NUMERIC_TYPES, "time": TEMPORAL_TYPES, None: NUMERIC_TYPES | TEMPORAL_TYPES}[kind]
        listed = ", ".join(f"<{t}>" for t in sorted(types))
        no_nan = "" if kind == "time" else f' && STR({var}) != "NaN"'
        return f"isLiteral({var}) && datatype({var}) IN ({listed}){no_nan}"

    def key(self, var: str, kind: str | None) -> str:
        """The key of ``var`` (known to be of ``kind``; None: either)."""
        if kind == "number":
            return self.number_key(var)
        if kind == "time":
            return self.time_key(var)
        numeric = ", ".join(f"<{t}>" for t in sorted(NUMERIC_TYPES))
        return f"IF(datatype({var}) IN ({numeric}), {self.key(var, 'number')}, {self.time_key(var)})"

    def number_key(self, var: str) -> str:
        """A number's key: its lexical form read as a double (so xsd:float 0.1 is 0.1)."""
        return f"<{XSD}double>(STR({var}))"

    def time_key(self, var: str) -> str:
        d, i = f"<{XSD}double>", f"<{XSD}integer>"
        s = f"STR({var})"
        b = f'IF(STRSTARTS({s}, "-"), SUBSTR({s}, 2), {s})'
        y = f'STRBEFORE(CONCAT(STRBEFORE(CONCAT(STRBEFORE(CONCAT({b}, "-"), "-"), "Z"), "Z"), "+"), "+")'
        n = f"STRLEN({y})"

        def part(offset: int) -> str:
            return f"{i}(SUBSTR({b}, {n} + {offset}, 2))"

        def has(*local: str) -> str:
            return f"datatype({var}) IN ({', '.join(f'<{XSD}{t}>' for t in local)})"

        year = f'IF(STRSTARTS({s}, "-"), -1, 1) * {i}({y})'
        month = f"IF({has('gYearMonth', 'date', 'dateTime')}, {part(2)}, 1)"
        day = f"IF({has('date', 'dateTime')}, {part(5)}, 1)"
        secs = f"IF({has('dateTime')}, {part(8)} * 3600 + {part(11)} * 60 + {part(14)}, 0)"
        return f"({d}({year} * 10000 + {month} * 100 + {day}) + {d}({secs}) / {d}(\"100000\"))"


class VirtuosoLiteralKeys(LiteralKeys):
    """Virtuoso matches literals by value (``1990``^^gYear meets ``1990-01-01``^^date, ``2``
    meets ``2.0``), so a typed literal is found by checking the datatype and then the key
    (numbers, dates) or the lexical form (other literals) of what is met."""

    def number_key(self, var: str) -> str:
        # Virtuoso evaluates both sides of && and fails the query casting a date to a double;
        # its loader keeps INF, -INF and NaN as typed strings, which are not isNumeric
        special = ", ".join(f'"{s}"' for s in SPECIAL_FLOATS)
        return f"<{XSD}double>(IF(isNumeric({var}), {var}, IF(STR({var}) IN ({special}), STR({var}), 0)))"

    def same_literal(self, var: str, literal: Literal, bind: Bind) -> str:
        """True when ``var`` is a literal of ``literal``'s datatype and value (a typed one)."""
        kind = literal_kind(literal)
        key = keys.key(literal)
        same = (
            f"{self.key(var, kind)} = {bind(float(key))}"
            if kind is not None and key is not None
            else f"STR({var}) = {bind(Literal(literal.value))}"  # also a NaN, which equals nothing
        )
        return f"isLiteral({var}) && datatype({var}) = <{literal.datatype}> && {same}"
