"""The Virtuoso flavour of the SPARQL dialect: only what Virtuoso 7 needs differently.

- Virtuoso writes xsd:double and xsd:float values in its JSON and XML results with six
  significant digits (``1.23457``), so every plain variable of a non-aggregating SELECT gets a
  companion column ``?<var>__exact`` holding the number printed with 17 digits; the store
  decodes the pair back to the exact value.
- ``sameTerm(?a, ?b)`` is evaluated wrongly (always false) when one variable comes from a
  subject position and the other from an object position, e.g. ``?d ?r ?s FILTER(!sameTerm(?d,
  ?s))`` keeps self-loops; ``=`` is right there. The compiler only compares terms of which at
  most one can be a literal (literals end walks), where ``=`` and ``sameTerm`` agree.
"""
from __future__ import annotations

import re

from sparql.compiler import SparqlCompiler

#: suffix of the companion column holding a numeric value's exact text
EXACT_SUFFIX = "__exact"

# a plain variable of a projection, outside any parenthesised expression
_PROJECTED = re.compile(r"\([^()]*(?:\([^()]*\)[^()]*)*\)|\?(\w+)")


class VirtuosoCompiler(SparqlCompiler):
    def same_term(self, a: str, b: str) -> str:
        return f"({a} = {b})"

    def select(self, head: str, body: str, tail: str = "", fetch: int | None = None) -> str:
        if "GROUP BY" not in tail:
            names = [m.group(1) for m in _PROJECTED.finditer(head) if m.group(1)]
            head += "".join(
                f' (IF(isNumeric(?{n}), bif:sprintf("%.17g", ?{n}), ?{n}{EXACT_SUFFIX}_none) AS ?{n}{EXACT_SUFFIX})'
                for n in names
            )
        return super().select(head, body, tail, fetch)
