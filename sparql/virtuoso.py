"""The Virtuoso dialect of SPARQL: only what Virtuoso 7 needs differently.

- Virtuoso writes xsd:double and xsd:float values in its JSON and XML results with six
  significant digits (``1.23457``), and in its Turtle results (which the store reads, being
  several times faster to write: ``sparql/turtle_results.py``) every number bare, so that a
  double without an exponent reads as a decimal. So each projected variable that can hold a
  literal (each builder of :class:`sparql.compiler.SparqlCompiler` names them to
  :meth:`select`) gets a companion column ``?<var>__exact`` holding a number printed with 17
  digits, a space and its datatype IRI; the store folds the pair back into the exact value.
- ``sameTerm(?a, ?b)`` is evaluated wrongly (always false) when one variable comes from a
  subject position and the other from an object position, e.g. ``?d ?r ?s FILTER(!sameTerm(?d,
  ?s))`` keeps self-loops; ``=`` is right there. The compiler only compares terms of which at
  most one can be a literal (literals end walks), where ``=`` and ``sameTerm`` agree.
- Literals are matched by value (``1990``^^gYear meets ``1990-01-01``^^date, ``2`` meets
  ``2.0``), so an edge to a literal anchor is found by value and then its object checked
  for the anchor's datatype and value (:meth:`VirtuosoCompiler.literal_edges`), and an
  S-expression's ``(JOIN r literal)`` checks what it meets (:meth:`literal_join`).
- Its bulk loader keeps xsd:double / xsd:float ``INF``, ``-INF`` and ``NaN`` as typed strings
  (the store writes them so through ``INSERT DATA`` too), while its SPARQL parser reads
  ``"INF"^^xsd:double`` as a number, which never meets them: such a literal is met through
  ``STRDT``, and its key is read from its text.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from engine.graph import Literal, is_special_float
from sparql.compiler import SparqlCompiler
from sparql.literal_keys import Bind, VirtuosoLiteralKeys

#: suffix of the companion column holding a numeric value's exact text
EXACT_SUFFIX = "__exact"
#: a SELECT head's projected variables: an expression's alias, or a variable
_PROJECTED = re.compile(r"\(.*? AS \?(\w+)\)|\?(\w+)")
#: ids (or pairs) per query: Virtuoso 7.2 cannot compile a query naming several thousand
#: (on MetaQA, ``names`` of ≈ 4,000 ids: "SQ199: Maximum size (32767) of a code vector
#: exceeded"; every operation at 10,000: "Too many arguments for standard built-in function"),
#: and compiling grows faster than the list (``two_hop_relations`` over 1,000 / 3,000 ids:
#: 0.39 / 1.58 s), so longer lists go as several queries
IDS_PER_QUERY = 1000


class VirtuosoCompiler(SparqlCompiler):
    dialect: ClassVar[str] = "virtuoso"
    keys: ClassVar[VirtuosoLiteralKeys] = VirtuosoLiteralKeys()

    def same_term(self, a: str, b: str) -> str:
        return f"({a} = {b})"

    def literal_edges(self, subject: str, rel: str, literal: Literal, obj: str, bind: Bind) -> str:
        if literal.datatype is None:
            return super().literal_edges(subject, rel, literal, obj, bind)
        # the by-value match finds the edge through the object index; for one subject and
        # relation Virtuoso keeps one of several equal values, so ?obj is that one object
        if is_special_float(literal):  # stored as a typed string, which only STRDT's value meets
            value = f"STRDT({bind(Literal(literal.value))}, <{literal.datatype}>)"
            return f"BIND({value} AS {obj}) ?{subject} {rel} {obj} . FILTER({self.keys.same_literal(obj, literal, bind)})"
        by_value = bind(literal)
        exact = self.keys.same_literal(obj, literal, bind)
        return f"?{subject} {rel} {by_value} . ?{subject} {rel} {obj} . FILTER({exact})"

    def literal_join(self, var: str, rel: str, literal: Literal, obj: str, bind: Bind) -> str:
        if literal.datatype is None:
            return super().literal_join(var, rel, literal, obj, bind)
        return f"{var} {rel} {obj} . FILTER({self.keys.same_literal(obj, literal, bind)})"

    def select(
        self, head: str, body: str, tail: str = "", fetch: int | None = None, literals: Sequence[str] = ()
    ) -> str:
        inner = super().select(head, body, tail, fetch)
        if not literals:
            return inner
        # The companions go in an outer SELECT: inside a query with a subquery (an
        # S-expression's ARGMAX), Virtuoso 7.2 fails to compile DATATYPE() in the projection
        # ("SQ156: Bad dfe in sqlo_place_exp").
        projected = " ".join("?" + (alias or var) for alias, var in _PROJECTED.findall(head))
        companions = "".join(
            f' (IF(isNumeric(?{n}), CONCAT(bif:sprintf("%.17g", ?{n}), " ", STR(DATATYPE(?{n}))), ?{n}{EXACT_SUFFIX}_none)'
            f" AS ?{n}{EXACT_SUFFIX})"
            for n in literals
        )
        return f"SELECT {projected}{companions} WHERE {{ {inner} }}"

