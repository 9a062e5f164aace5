"""The Virtuoso flavour of the SPARQL dialect: only what Virtuoso 7 needs differently.

- Virtuoso writes xsd:double and xsd:float values in its JSON and XML results with six
  significant digits (``1.23457``). So each projected variable that can hold a literal (it
  is the object of a triple pattern, not bound by VALUES, not filtered to non-literals) gets a
  companion column ``?<var>__exact`` holding a number printed with 17 digits; the store folds
  the pair back into the exact value.
- ``sameTerm(?a, ?b)`` is evaluated wrongly (always false) when one variable comes from a
  subject position and the other from an object position, e.g. ``?d ?r ?s FILTER(!sameTerm(?d,
  ?s))`` keeps self-loops; ``=`` is right there. The compiler only compares terms of which at
  most one can be a literal (literals end walks), where ``=`` and ``sameTerm`` agree.
- Literals are matched by value (``1990``^^gYear meets ``1990-01-01``^^date, ``2`` meets
  ``2.0``), so an edge to a literal anchor is found by value and then its object checked
  for the anchor's datatype and value (:meth:`VirtuosoCompiler.literal_edges`).
"""
from __future__ import annotations

import re

from engine.graph import Literal
from sparql.compiler import SparqlCompiler

#: suffix of the companion column holding a numeric value's exact text
EXACT_SUFFIX = "__exact"

# a plain variable of a projection, outside any parenthesised expression
_PROJECTED = re.compile(r"\([^()]*(?:\([^()]*\)[^()]*)*\)|\?(\w+)")
# the object variable of a triple pattern `?s <p> ?o .` or `?s ?p ?o .`
_OBJECT = re.compile(r"\?\w+\s+(?:<[^<>\s]*>|\?\w+)\s+\?(\w+)\s*\.")
_VALUES = re.compile(r"VALUES\s+(?:\?(\w+)|\(([^)]*)\))")
_NOT_LITERAL = re.compile(r"FILTER\(!isLiteral\(\?(\w+)\)\)")


class VirtuosoCompiler(SparqlCompiler):
    def same_term(self, a: str, b: str) -> str:
        return f"({a} = {b})"

    def literal_edges(self, subject: str, rel: str, literal: Literal, obj: str) -> str:
        if literal.datatype is None:
            return super().literal_edges(subject, rel, literal, obj)
        from sparql.sexpr import VirtuosoSexprCompiler  # it builds on this module

        # the by-value match finds the edge through the object index; for one subject and
        # relation Virtuoso keeps one of several equal values, so ?obj is that one object
        exact = VirtuosoSexprCompiler(self).same_literal(f"?{obj}", literal)
        return f"?{subject} {rel} {self.t.literal(literal)} . ?{subject} {rel} ?{obj} . FILTER({exact})"

    def select(self, head: str, body: str, tail: str = "", fetch: int | None = None) -> str:
        if "GROUP BY" not in tail:
            head += "".join(
                f' (IF(isNumeric(?{n}), bif:sprintf("%.17g", ?{n}), ?{n}{EXACT_SUFFIX}_none) AS ?{n}{EXACT_SUFFIX})'
                for n in _literal_variables(head, body)
            )
        return super().select(head, body, tail, fetch)


def _literal_variables(head: str, body: str) -> list[str]:
    """The projected variables of a query that can be bound to a literal."""
    bound = set()
    for single, several in _VALUES.findall(body):
        bound.update([single] if single else re.findall(r"\?(\w+)", several))
    objects = set(_OBJECT.findall(body)) - bound - set(_NOT_LITERAL.findall(body))
    return [n for n in (m.group(1) for m in _PROJECTED.finditer(head)) if n and n in objects]
