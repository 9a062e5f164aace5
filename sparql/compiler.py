"""The SPARQL dialect: one method per operation of :mod:`engine.ops`, each returning
``Compiled(text, params)``.

Values (ids, literals, search text) are ``$name`` parameters that the store binds at
execution (:meth:`sparql.terms.Terms.bind`): a list of ids becomes the rows of a ``VALUES``
block. Relation names enter the text only as IRIs, through :meth:`Terms.relation` (validated).
The column names are part of the contract with the store that decodes the rows.

The Virtuoso dialect (``sparql/virtuoso.py``) subclasses :class:`SparqlCompiler` and
overrides only its hooks: :meth:`same_term`, :meth:`literal_edges`, :meth:`literal_join`,
:attr:`keys` and :meth:`select` (which gets, from each builder, the projected variables
that can hold a literal).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from engine.errors import UnsupportedOperationError
from engine.graph import FREEBASE_NS, NAME_RELATION, TYPE_RELATION, Literal
from engine.ops import (
    Compiled,
    Compiler,
    CountEntities,
    CountTriples,
    Entities,
    Execute,
    Expand,
    LiteralRelations,
    LiteralTwoHopRelations,
    Names,
    RelationCounts,
    Relations,
    RelationTypes,
    Search,
    TwoHopRelations,
    Types,
    Walks,
)
from sparql.literal_keys import Bind, LiteralKeys
from sparql.sexpr import SexprCompiler
from sparql.terms import Terms


class Params(dict):
    """A query's parameters; :meth:`bind` adds a value under a fresh name and returns its
    ``$placeholder``."""

    def bind(self, value: Any) -> str:
        name = f"p{len(self)}"
        self[name] = value
        return "$" + name


class SparqlCompiler(Compiler):
    dialect: ClassVar[str] = "sparql"
    keys: ClassVar[LiteralKeys] = LiteralKeys()

    def __init__(self, namespace: str = FREEBASE_NS, graph: str | None = None) -> None:
        self.t = Terms(namespace)
        self.graph = graph  # a named graph to read from (FROM <graph>), or the default graph

    # ------------------------------------------------------------------ helpers
    def from_clause(self) -> str:
        return f"FROM <{self.graph}> " if self.graph else ""

    @staticmethod
    def limit(fetch: int | None) -> str:
        return f" LIMIT {int(fetch)}" if fetch is not None else ""

    def select(
        self, head: str, body: str, tail: str = "", fetch: int | None = None, literals: Sequence[str] = ()
    ) -> str:
        """A SELECT; ``literals`` names the projected variables that can be bound to a
        literal (a dialect may need to read those differently)."""
        return f"SELECT {head} {self.from_clause()}WHERE {{ {body} }}{tail}{self.limit(fetch)}"

    def one_hop(self, node: str, rel: str, other: str, direction: str, dir_var: str | None = None) -> str:
        """Edges from ``?node`` to ``?other`` through ``rel`` (an IRI or a variable), per the walk
        semantics: with ``both`` a self-loop is matched by the forward branch only."""
        out = f"?{node} {rel} ?{other} ."
        inn = f"?{other} {rel} ?{node} ."
        if direction == "out":
            return out + (f' BIND("out" AS ?{dir_var})' if dir_var else "")
        if direction == "in":
            return inn + (f' BIND("in" AS ?{dir_var})' if dir_var else "")
        dir_var = dir_var or f"{node}_{other}_dir"
        return (
            f'{{ {out} BIND("out" AS ?{dir_var}) }} UNION '
            f'{{ {inn} BIND("in" AS ?{dir_var}) FILTER(!{self.same_term(f"?{other}", f"?{node}")}) }}'
        )

    def same_term(self, a: str, b: str) -> str:
        """True when two terms are the same RDF term."""
        return f"sameTerm({a}, {b})"

    def rel_term(self, relation: str | None, var: str) -> str:
        return f"?{var}" if relation is None else self.t.relation(relation)

    def literal_edges(self, subject: str, rel: str, literal: Literal, obj: str, bind: Bind) -> str:
        """Edges from ``?subject`` through ``rel`` (an IRI or a variable) whose object is exactly
        ``literal``; ``obj`` is a variable a dialect may use for the object, ``bind(value)``
        writes a value as a parameter."""
        return f"?{subject} {rel} {bind(literal)} ."

    def literal_join(self, var: str, rel: str, literal: Literal, obj: str, bind: Bind) -> str:
        """S-expressions' ``(JOIN rel literal)``: the subjects ``var`` of that very literal."""
        return f"{var} {rel} {bind(literal)} ."

    def literal_anchors(self, literals: Sequence[Literal], subject: str, rel: str, params: Params) -> str:
        """One UNION branch per literal anchor, binding ``?i`` to its index in ``literals``
        (the store maps it back, so a literal never has to come back from the database)."""
        return " UNION ".join(
            f"{{ {self.literal_edges(subject, rel, lit, f'?o{i}', params.bind)} BIND({i} AS ?i) }}"
            for i, lit in enumerate(literals)
        )

    # ------------------------------------------------------------------ operations
    def relations(self, op: Relations) -> Compiled:
        body = "VALUES ?id { $ids } " + self.one_hop("id", "?rel", "x", op.direction, "dir")
        text = self.select("?id ?rel ?dir (COUNT(*) AS ?n)", body, " GROUP BY ?id ?rel ?dir", op.limit)
        return Compiled(text, {"ids": list(op.ids)})

    def literal_relations(self, op: LiteralRelations) -> Compiled:
        """Columns i (index of the literal), rel, n: the edges entering each literal."""
        params = Params()
        body = self.literal_anchors(op.literals, "x", "?rel", params)
        return Compiled(self.select("?i ?rel (COUNT(*) AS ?n)", body, " GROUP BY ?i ?rel", op.limit), params)

    def expand(self, op: Expand) -> Compiled:
        body = "VALUES ?src { $ids } "
        if op.relations is None:
            body += self.one_hop("src", "?rel", "dst", op.direction, "dir")
        else:
            # One branch per relation with the IRI written in: Oxigraph joins a separate
            # `VALUES ?rel` only after matching every edge of the ids (5-8x slower, measured).
            body += " UNION ".join(
                f"{{ {self.one_hop('src', iri, 'dst', op.direction, 'dir')} BIND({iri} AS ?rel) }}"
                for iri in (self.t.relation(r) for r in op.relations)
            )
        literals = ["dst"] if op.direction != "in" else []  # with "in", ?dst is a subject
        return Compiled(self.select("?src ?rel ?dst ?dir", body, "", op.limit, literals), {"ids": list(op.ids)})

    def walks(self, op: Walks) -> Compiled:
        """Columns: n0..nL (nodes), r<i> for hops with any relation (but those of ``op.exclude``),
        d<i> ("out"/"in") per hop."""
        path, hops = op.path, len(op.path)
        if op.pairs is not None:
            params: dict[str, Any] = {"pairs": [tuple(pair) for pair in op.pairs]}
            parts = [f"VALUES (?n0 ?n{hops}) {{ $pairs }}"]
        else:
            params = {"ids": list(op.seeds)}
            parts = ["VALUES ?n0 { $ids }"]
        for i, relation in enumerate(path):
            parts.append(self.hop_pattern(i, relation, op.direction))
            if relation is None and op.exclude:
                parts.append(f"FILTER(?r{i} NOT IN ({', '.join(self.t.relation(r) for r in op.exclude)}))")
            if 0 < i + 1 < hops:
                parts.append(f"FILTER(!isLiteral(?n{i + 1}))")  # literals are dead ends
        if op.distinct_edges:
            parts.extend(self.edge_reuse_filters(path, op.direction))
        head = " ".join(f"?n{i}" for i in range(hops + 1))
        head += "".join(f" ?r{i}" for i, r in enumerate(path) if r is None)
        head += "".join(f" ?d{i}" for i in range(hops))
        # only the last node can be a literal, and only when it is an object, not a given end
        literals = [f"n{hops}"] if op.direction != "in" and op.pairs is None else []
        return Compiled(self.select(head, " ".join(parts), "", op.limit, literals), params)

    def hop_pattern(self, i: int, relation: str | None, direction: str) -> str:
        rel = self.rel_term(relation, f"r{i}")
        a, b = f"n{i}", f"n{i + 1}"
        if direction == "out":
            return f'?{a} {rel} ?{b} . BIND("out" AS ?d{i})'
        if direction == "in":
            return f'?{b} {rel} ?{a} . BIND("in" AS ?d{i})'
        return (
            f'{{ ?{a} {rel} ?{b} . BIND("out" AS ?d{i}) }} UNION '
            f'{{ ?{b} {rel} ?{a} . BIND("in" AS ?d{i}) FILTER(!{self.same_term(f"?{a}", f"?{b}")}) }}'
        )

    def edge_reuse_filters(self, path: Sequence[str | None], direction: str) -> list[str]:
        """Filters that stop a walk from using one stored triple twice."""
        filters = []

        def ends(i: int) -> tuple[str, str]:
            a, b = f"?n{i}", f"?n{i + 1}"
            if direction == "out":
                return a, b
            if direction == "in":
                return b, a
            return f'IF(?d{i} = "out", {a}, {b})', f'IF(?d{i} = "out", {b}, {a})'

        for i in range(len(path)):
            for j in range(i + 1, len(path)):
                ri, rj = path[i], path[j]
                if ri is not None and rj is not None and ri != rj:
                    continue  # different relations: never the same triple
                (si, oi), (sj, oj) = ends(i), ends(j)
                same = [self.same_term(si, sj), self.same_term(oi, oj)]
                if ri is None and rj is None:
                    same.append(self.same_term(f"?r{i}", f"?r{j}"))
                elif ri is None or rj is None:
                    var, fixed = (f"?r{i}", rj) if ri is None else (f"?r{j}", ri)
                    same.append(self.same_term(var, self.t.relation(fixed)))  # type: ignore[arg-type]
                filters.append("FILTER(!(" + " && ".join(same) + "))")
        return filters

    def two_hop_relations(self, op: TwoHopRelations) -> Compiled:
        middles = "VALUES ?id { $ids } " + self.one_hop("id", self.t.relation(op.r1), "m", op.direction, "d1")
        body = (
            f"{{ SELECT DISTINCT ?id ?m WHERE {{ {middles} FILTER(!isLiteral(?m)) }} }} "
            + self.one_hop("m", "?rel", "x", "both", "dir")
        )
        text = self.select("?id ?rel ?dir (COUNT(*) AS ?n)", body, " GROUP BY ?id ?rel ?dir", op.limit)
        return Compiled(text, {"ids": list(op.ids)})

    def literal_two_hop_relations(self, op: LiteralTwoHopRelations) -> Compiled:
        """Columns i, rel, dir, n: the relations of the subjects of each literal's ``r1`` edges."""
        params = Params()
        middles = self.literal_anchors(op.literals, "m", self.t.relation(op.r1), params)
        body = f"{{ SELECT DISTINCT ?i ?m WHERE {{ {middles} }} }} " + self.one_hop("m", "?rel", "x", "both", "dir")
        return Compiled(self.select("?i ?rel ?dir (COUNT(*) AS ?n)", body, " GROUP BY ?i ?rel ?dir", op.limit), params)

    def names(self, op: Names) -> Compiled:
        """Columns id, name: each id that is a node, with each of its name literals, or once
        with ?name unbound when it has none."""
        body = (
            f"VALUES ?id {{ $ids }} OPTIONAL {{ ?id {self.t.relation(NAME_RELATION)} ?name . FILTER(isLiteral(?name)) }}"
            " FILTER(BOUND(?name) || EXISTS { ?id ?p ?o } || EXISTS { ?s ?p ?id })"
        )
        return Compiled(self.select("?id ?name", body, "", op.limit, ["name"]), {"ids": list(op.ids)})

    def types(self, op: Types) -> Compiled:
        body = f"VALUES ?id {{ $ids }} ?id {self.t.relation(TYPE_RELATION)} ?type . FILTER(!isLiteral(?type))"
        return Compiled(self.select("?id ?type", body, "", op.limit), {"ids": list(op.ids)})

    def search(self, op: Search) -> Compiled:
        """Columns id, name: the entities whose name literal matches, then (?name unbound) the
        nodes without a name literal whose id matches; ``op.limit`` of each. Ids are
        percent-encoded in their IRIs, so for ``prefix`` and ``contains`` the second part is a
        superset for the store to filter (:meth:`Terms.id_pattern`)."""
        name = self.t.relation(NAME_RELATION)
        names = f"?id {name} ?name . FILTER(isLiteral(?name)) "
        unnamed = f"FILTER NOT EXISTS {{ ?id {name} ?n . FILTER(isLiteral(?n)) }}"
        if op.mode == "exact":
            names += "FILTER(STR(?name) = $text)"
            params: dict[str, Any] = {"text": Literal(op.text), "id": op.text}
            ids = f"VALUES ?id {{ $id }} FILTER(EXISTS {{ ?id ?p ?o }} || EXISTS {{ ?s ?p ?id }}) {unnamed}"
        else:
            names += f"FILTER({'STRSTARTS' if op.mode == 'prefix' else 'CONTAINS'}(LCASE(STR(?name)), $text))"
            pattern = self.t.id_pattern(op.text.lower(), anchored=op.mode == "prefix")
            params = {"text": Literal(op.text.lower()), "pattern": Literal(pattern)}
            ids = (
                "{ SELECT DISTINCT ?id WHERE { { ?id ?p ?o } UNION { ?s ?p ?id } } } "
                f'FILTER(isIRI(?id) && REGEX(STR(?id), $pattern, "i")) {unnamed}'
            )
        body = (
            f"{{ SELECT ?id ?name WHERE {{ {names} }}{self.limit(op.limit)} }} UNION "
            f"{{ SELECT ?id WHERE {{ {ids} }}{self.limit(op.limit)} }}"
        )
        return Compiled(self.select("?id ?name", body, "", None, ["name"]), params)

    def execute(self, op: Execute) -> Compiled:
        """Columns ``v0`` (the answers) or ``n`` (a count); see ``sparql/sexpr.py``."""
        return SexprCompiler(self).compile(op.tree)

    def count_triples(self, op: CountTriples) -> Compiled:
        return Compiled(self.select("(COUNT(*) AS ?n)", "?s ?p ?o"), {})

    def count_entities(self, op: CountEntities) -> Compiled:
        body = "{ ?e ?p ?o } UNION { ?s ?p ?e . FILTER(!isLiteral(?e)) }"
        return Compiled(self.select("(COUNT(DISTINCT ?e) AS ?n)", body), {})

    def entities(self, op: Entities) -> Compiled:
        body = "{ ?e ?p ?o } UNION { ?s ?p ?e . FILTER(!isLiteral(?e)) }"
        return Compiled(self.select("DISTINCT ?e", body, "", op.limit), {})

    def relation_types(self, op: RelationTypes) -> Compiled:
        return Compiled(self.select("DISTINCT ?p", "?s ?p ?o"), {})

    def relation_counts(self, op: RelationCounts) -> Compiled:
        """Columns p, n: the triples of every relation (one GROUP BY over the graph)."""
        if op.relations is not None:
            raise UnsupportedOperationError(
                f"the {self.dialect} dialect counts every relation at once: give relations=None"
            )
        return Compiled(self.select("?p (COUNT(*) AS ?n)", "?s ?p ?o", " GROUP BY ?p"), {})
