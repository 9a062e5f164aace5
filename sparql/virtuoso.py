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
- Virtuoso compiles each new query text, and a text with its ids written in is new at every
  call. A single id goes instead as a URL parameter, which its endpoint binds to the global
  variable ``?::name`` (:func:`bind_with_parameters`), so the text repeats and its plan is
  reused; so do short lists where a triple pattern binds them (:data:`IDS_AS_PARAMETERS`), and
  with them the relation names of ``two_hop_relations``, ``expand``, S-expressions and walks
  from one seed (:func:`_relations_as_parameters`), without which a graph of many relations
  (Freebase) meets a new text at almost every call. Why and how far: docs/design/virtuoso-query-texts.md.
- A group in which a ``BIND`` follows the triple pattern, joined to a variable that a URL
  parameter binds, fails to compile ("SR204: Missing named parameter") once Virtuoso is told a
  ``timeout``: ``expand`` through one relation writes its hop without a group
  (:meth:`VirtuosoCompiler.expand`).
- Its bulk loader keeps xsd:double / xsd:float ``INF``, ``-INF`` and ``NaN`` as typed strings
  (the store writes them so through ``INSERT DATA`` too), while its SPARQL parser reads
  ``"INF"^^xsd:double`` as a number, which never meets them: such a literal is met through
  ``STRDT``, and its key is read from its text.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import ClassVar

from engine.graph import Literal, is_special_float
from engine.limits import VIRTUOSO
from engine.ops import Compiled, Execute, Expand, Op, TwoHopRelations, Walks
from engine.sexpr.tree import relations as tree_relations
from sparql.compiler import SparqlCompiler
from sparql.literal_keys import Bind, VirtuosoLiteralKeys
from sparql.readonly import bind_parameters
from sparql.terms import Terms

#: suffix of the companion column holding a numeric value's exact text
EXACT_SUFFIX = "__exact"
#: a SELECT head's projected variables: an expression's alias, or a variable
_PROJECTED = re.compile(r"\(.*? AS \?(\w+)\)|\?(\w+)")
#: ids (or pairs) per query: Virtuoso 7.2 cannot compile a query naming several thousand, and
#: compiling grows faster than the list (docs/design/virtuoso-query-texts.md)
IDS_PER_QUERY = 1000
#: a compiled query's one-column VALUES block of ids
_ID_ROWS = re.compile(r"VALUES \?(\w+) \{ \$(\w+) \}")
#: Lists of ids that go as URL parameters in ``FILTER(?id IN (...))``, padded to a power of
#: two so that a few texts serve every length: at most this many, per operation. Only
#: operations whose ids a triple pattern binds in every branch of their group, so that the
#: filter keeps the rows a VALUES block would (``names`` and ``types`` keep ids with no edge,
#: which only VALUES brings in). The bounds were measured: docs/design/virtuoso-query-texts.md.
IDS_AS_PARAMETERS = {"relations": 16, "two_hop_relations": 32, "expand": 32, "walks": 32}
#: Walks from at most this many seeds send their relations as parameters too; from more,
#: Virtuoso's plan without them costs more than compiling (:func:`_relations_as_parameters`).
#: From one seed the plan starts at the seed, whatever the relations; from an ``IN`` list of
#: seeds it can start elsewhere (docs/design/virtuoso-query-texts.md).
WALK_SEEDS_WITH_RELATION_PARAMETERS = 1
#: The longest IRI (UTF-8 bytes) of an id that goes as a URL parameter: the longest Virtuoso
#: keeps (engine/limits.py). It reads a parameter as a Turtle term and refuses an IRI from
#: 7,998 bytes ("The relative IRI notation is too long"); a longer id is in none of its graphs
#: anyway, so it is written in, where the query finds nothing for it.
PARAMETER_IRI_BYTES: int = VIRTUOSO.id_bytes  # type: ignore[assignment]


def _fits_as_parameter(node_id: str, terms: Terms) -> bool:
    return len(terms.iri(node_id).encode("utf-8")) - 2 <= PARAMETER_IRI_BYTES  # without its <>


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

    def expand(self, op: Expand) -> Compiled:
        """The generic text, except that one relation's hop is not a group of its own.

        Virtuoso 7.2 cannot join a group in which a ``BIND`` follows the triple pattern to a
        variable that a parameter binds: ``{ BIND(?::ids AS ?src) } { ?dst ?::rel_0 ?src .
        BIND("in" AS ?dir) BIND(?::rel_0 AS ?rel) }`` fails with "SR204: Missing named
        parameter 'src'" once it is told a ``timeout`` (the store tells it one on every call)
        or asked for JSON, and the ``out`` hop too inside the companions' SELECT when it has no
        ``LIMIT``. The same hop without its braces (as ``relations`` and walks write theirs), a
        ``UNION`` of such groups (several relations) and the ``IN`` filter of several ids all
        run; around a single hop the braces mean nothing."""
        compiled = super().expand(op)
        if op.relations is None or len(op.relations) != 1:
            return compiled
        iri = self.t.relation(op.relations[0])
        hop = f"{self.one_hop('src', iri, 'dst', op.direction, 'dir')} BIND({iri} AS ?rel)"
        return Compiled(compiled.text.replace(f"{{ {hop} }}", hop, 1), compiled.params)

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


def bind_with_parameters(op: Op, compiled: Compiled, terms: Terms) -> tuple[str, list[tuple[str, str]]]:
    """A compiled query's text for Virtuoso and the URL parameters that go with it.

    Each ``VALUES ?var { $name }`` block of a single id becomes ``{ BIND(?::name AS ?var) }``
    and the id goes as the URL parameter ``?name`` (Virtuoso reads it as a Turtle term, here
    an escaped IRI), so that the text is the same for every id. In ``relations``,
    ``two_hop_relations``, ``expand`` and walks from seeds, whose ids a triple pattern binds,
    a block of 2 ids up to the operation's :data:`IDS_AS_PARAMETERS` becomes ``FILTER(?var IN
    (?::name_0, ...))`` at the end of its group, the list padded with its last id to a power
    of two.
    Every other parameter is written in (:meth:`Terms.bind`), and so is everything in a text
    with ``EXISTS``: Virtuoso's ``EXISTS`` does not see a variable bound by ``BIND``,
    parameter or not (a missing id passes ``FILTER(EXISTS { ?id ?p ?o })``).

    Longer lists, and lists elsewhere, stay written in: a union of ``BIND`` clauses costs
    more to compile than the list does, and a long ``IN`` list of parameters is planned badly
    (docs/design/virtuoso-query-texts.md).

    Where the ids go as parameters, so do the relation names of ``two_hop_relations``,
    ``expand``, S-expressions, and walks from one seed
    (:data:`WALK_SEEDS_WITH_RELATION_PARAMETERS`; :func:`_relations_as_parameters`)."""
    named = _named_relations(op)
    if named and "EXISTS" not in compiled.text:
        replaced = _relations_as_parameters(compiled.text, named, terms)
        bound = replaced and _ids_as_parameters(op, Compiled(replaced, compiled.params), terms)
        if bound:
            text, sent = bound
            return text, sent + [(f"?rel_{j}", terms.relation(name)) for j, name in enumerate(named)]
    return _ids_as_parameters(op, compiled, terms) or (terms.bind(compiled), [])


def _ids_as_parameters(op: Op, compiled: Compiled, terms: Terms) -> tuple[str, list[tuple[str, str]]] | None:
    """The text and parameters with the ids as parameters (above), or None where none go so."""
    text, params = compiled
    rows = _id_rows(text)
    most = IDS_AS_PARAMETERS.get(op.name, 0)
    if most and len(rows) == 1:
        start, end, var, name = rows[0]
        ids = params.get(name)
        if (
            type(ids) is list
            and 2 <= len(ids) <= most
            and all(type(i) is str and _fits_as_parameter(i, terms) for i in ids)
        ):
            width = 1 << (len(ids) - 1).bit_length()
            padded = ids + ids[-1:] * (width - len(ids))
            close = _group_end(text, end)
            listed = ", ".join(f"?::{name}_{j}" for j in range(width))
            filtered = text[:start] + text[end:close] + f"FILTER(?{var} IN ({listed})) " + text[close:]
            written = {key: value for key, value in params.items() if key != name}
            sent = [(f"?{name}_{j}", terms.parameter(name, one)) for j, one in enumerate(padded)]
            return bind_parameters(filtered, written, terms.parameter), sent
    sent: list[tuple[str, str]] = []
    written = dict(params)
    pieces, pos = [], 0
    for start, end, var, name in rows:
        value = params.get(name)
        if type(value) is list and len(value) == 1:
            value = value[0]
        if type(value) is not str or not _fits_as_parameter(value, terms):
            continue
        written.pop(name, None)
        sent.append((f"?{name}", terms.parameter(name, value)))
        pieces += [text[pos:start], f"{{ BIND(?::{name} AS ?{var}) }}"]
        pos = end
    if not sent:
        return None
    return bind_parameters("".join(pieces) + text[pos:], written, terms.parameter), sent


def _relations_as_parameters(text: str, named: tuple[str, ...], terms: Terms) -> str | None:
    """A compiled text with the IRI of each relation of ``named`` replaced by ``?::rel_j``,
    ``j`` its place in ``named`` (the caller sends the IRIs as the parameters ``?rel_j``); None
    where one of them is also written as a function (an XSD cast), which a variable cannot be.

    Compiling a new text costs more than running a plan made without the relations, except
    for a walk from several seeds, whose plan made without them gets slower with its seeds; so
    only a walk from one seed (its plan starts there) sends its relations as parameters
    (:data:`WALK_SEEDS_WITH_RELATION_PARAMETERS`; measured: docs/design/virtuoso-query-texts.md).

    In a compiled text a relation's IRI is a term (of a triple pattern, a ``BIND``, an ``IN``
    list), and every value from outside is still a ``$name`` placeholder, so no string holds
    one; the parameter, bound to that IRI, means the same."""
    for j, name in enumerate(named):
        iri = terms.relation(name)
        if iri + "(" in text:
            return None
        text = text.replace(iri, f"?::rel_{j}")
    return text


def _named_relations(op: Op) -> tuple[str, ...]:
    """The relation names an operation's text holds that go as parameters, each once."""
    if isinstance(op, Walks):
        if len(op.seeds) > WALK_SEEDS_WITH_RELATION_PARAMETERS:
            return ()
        named: Iterable[str | None] = op.path
    elif isinstance(op, TwoHopRelations):
        named = (op.r1,)
    elif isinstance(op, Expand):
        named = op.relations or ()
    elif isinstance(op, Execute):
        named = tree_relations(op.tree)
    else:
        return ()
    return tuple(dict.fromkeys(name for name in named if name is not None))


@functools.lru_cache(maxsize=1024)
def _group_end(text: str, pos: int) -> int:
    """Where the group that is open at ``pos`` closes: its ``}``. A compiled text's braces
    outside strings are its groups' (IRIs are written without braces; ``Terms.iri``)."""
    depth, quoted, i = 0, False, pos
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "\\":
                i += 1  # an escaped character
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    raise ValueError(f"no group closes after position {pos} of a compiled query")


@functools.lru_cache(maxsize=1024)
def _id_rows(text: str) -> tuple[tuple[int, int, str, str], ...]:
    """Where each one-column ``VALUES`` block of a parameter starts and ends, its variable and
    its parameter's name; none in a text with ``EXISTS`` (compiled texts repeat, so each is
    read once)."""
    if "EXISTS" in text:
        return ()
    return tuple((m.start(), m.end(), m.group(1), m.group(2)) for m in _ID_ROWS.finditer(text))
