"""The SPARQL dialect: one builder per operation of the vocabulary.

Ids enter as percent-encoded IRIs and literals as escaped N-Triples text (see ``terms.py``);
relation names are validated before they get here. Each builder returns the query text; the
column names are part of the contract with the store that decodes the rows.

A flavour (Virtuoso) subclasses :class:`SparqlCompiler` and overrides only what differs.
"""
from __future__ import annotations

from engine.graph import NAME_RELATION, TYPE_RELATION, Literal
from sparql.terms import Terms, string_literal


class SparqlCompiler:
    def __init__(self, terms: Terms, graph: str | None = None) -> None:
        self.t = terms
        self.graph = graph  # a named graph to read from (FROM <graph>), or the default graph

    # ------------------------------------------------------------------ helpers
    def from_clause(self) -> str:
        return f"FROM <{self.graph}> " if self.graph else ""

    @staticmethod
    def limit(fetch: int | None) -> str:
        return f" LIMIT {int(fetch)}" if fetch is not None else ""

    def select(self, head: str, body: str, tail: str = "", fetch: int | None = None) -> str:
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
        return f"?{var}" if relation is None else self.t.iri(relation)

    def literal_edges(self, subject: str, rel: str, literal: Literal, obj: str) -> str:
        """Edges from ``?subject`` through ``rel`` (an IRI or a variable) whose object is exactly
        ``literal``; ``obj`` names a variable a flavour may use for the object."""
        return f"?{subject} {rel} {self.t.literal(literal)} ."

    def literal_anchors(self, literals: list[Literal], subject: str, rel: str) -> str:
        """One UNION branch per literal anchor, binding ``?i`` to its index in ``literals``
        (the store maps it back, so a literal never has to come back from the database)."""
        return " UNION ".join(
            f"{{ {self.literal_edges(subject, rel, lit, f'o{i}')} BIND({i} AS ?i) }}" for i, lit in enumerate(literals)
        )

    # ------------------------------------------------------------------ operations
    def relations(self, ids: list[str], direction: str, fetch: int | None) -> str:
        body = self.t.values("id", ids) + " " + self.one_hop("id", "?rel", "x", direction, "dir")
        return self.select("?id ?rel ?dir (COUNT(*) AS ?n)", body, " GROUP BY ?id ?rel ?dir", fetch)

    def literal_relations(self, literals: list[Literal], fetch: int | None) -> str:
        """Columns i (index of the literal), rel, n: the edges entering each literal."""
        body = self.literal_anchors(literals, "x", "?rel")
        return self.select("?i ?rel (COUNT(*) AS ?n)", body, " GROUP BY ?i ?rel", fetch)

    def expand(self, ids: list[str], relations: list[str] | None, direction: str, fetch: int | None) -> str:
        body = self.t.values("src", ids) + " "
        if relations is None:
            body += self.one_hop("src", "?rel", "dst", direction, "dir")
        else:
            # One branch per relation with the IRI written in: Oxigraph joins a separate
            # `VALUES ?rel` only after matching every edge of the ids (5-8x slower, measured).
            body += " UNION ".join(
                f"{{ {self.one_hop('src', iri, 'dst', direction, 'dir')} BIND({iri} AS ?rel) }}"
                for iri in (self.t.iri(r) for r in relations)
            )
        return self.select("?src ?rel ?dst ?dir", body, "", fetch)

    def walks(
        self,
        seeds: list[str],
        path: list[str | None],
        direction: str,
        fetch: int | None,
        pairs: list[tuple[str, str]] | None,
        distinct_edges: bool = True,
    ) -> str:
        """Columns: n0..nL (nodes), r<i> for hops with any relation, d<i> ("out"/"in") per hop."""
        hops = len(path)
        if pairs is not None:
            rows = " ".join(f"({self.t.iri(s)} {self.t.iri(t)})" for s, t in pairs)
            parts = [f"VALUES (?n0 ?n{hops}) {{ {rows} }}"]
        else:
            parts = [self.t.values("n0", seeds)]
        for i, relation in enumerate(path):
            parts.append(self.hop_pattern(i, relation, direction))
            if 0 < i + 1 < hops:
                parts.append(f"FILTER(!isLiteral(?n{i + 1}))")  # literals are dead ends
        if distinct_edges:
            parts.extend(self.edge_reuse_filters(path, direction))
        head = " ".join(f"?n{i}" for i in range(hops + 1))
        head += "".join(f" ?r{i}" for i, r in enumerate(path) if r is None)
        head += "".join(f" ?d{i}" for i in range(hops))
        return self.select(head, " ".join(parts), "", fetch)

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

    def edge_reuse_filters(self, path: list[str | None], direction: str) -> list[str]:
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
                    same.append(self.same_term(var, self.t.iri(fixed)))  # type: ignore[arg-type]
                filters.append("FILTER(!(" + " && ".join(same) + "))")
        return filters

    def two_hop_relations(self, ids: list[str], r1: str, direction: str, fetch: int | None) -> str:
        middles = self.t.values("id", ids) + " " + self.one_hop("id", self.t.iri(r1), "m", direction, "d1")
        body = (
            f"{{ SELECT DISTINCT ?id ?m WHERE {{ {middles} FILTER(!isLiteral(?m)) }} }} "
            + self.one_hop("m", "?rel", "x", "both", "dir")
        )
        return self.select("?id ?rel ?dir (COUNT(*) AS ?n)", body, " GROUP BY ?id ?rel ?dir", fetch)

    def literal_two_hop_relations(self, literals: list[Literal], r1: str, fetch: int | None) -> str:
        """Columns i, rel, dir, n: the relations of the subjects of each literal's ``r1`` edges."""
        middles = self.literal_anchors(literals, "m", self.t.iri(r1))
        body = f"{{ SELECT DISTINCT ?i ?m WHERE {{ {middles} }} }} " + self.one_hop("m", "?rel", "x", "both", "dir")
        return self.select("?i ?rel ?dir (COUNT(*) AS ?n)", body, " GROUP BY ?i ?rel ?dir", fetch)

    def names(self, ids: list[str]) -> str:
        body = self.t.values("id", ids) + f" ?id {self.t.iri(NAME_RELATION)} ?name . FILTER(isLiteral(?name))"
        return self.select("?id ?name", body)

    def types(self, ids: list[str]) -> str:
        body = self.t.values("id", ids) + f" ?id {self.t.iri(TYPE_RELATION)} ?type . FILTER(!isLiteral(?type))"
        return self.select("?id ?type", body)

    def search(self, text: str, mode: str, fetch: int | None) -> str:
        body = f"?id {self.t.iri(NAME_RELATION)} ?name . FILTER(isLiteral(?name)) "
        if mode == "exact":
            body += f"FILTER(STR(?name) = {string_literal(text)})"
        elif mode == "prefix":
            body += f"FILTER(STRSTARTS(LCASE(STR(?name)), {string_literal(text.lower())}))"
        else:
            body += f"FILTER(CONTAINS(LCASE(STR(?name)), {string_literal(text.lower())}))"
        return self.select("?id ?name", body, "", fetch)

    def count_triples(self) -> str:
        return self.select("(COUNT(*) AS ?n)", "?s ?p ?o")

    def relation_counts(self) -> str:
        return self.select("?p (COUNT(*) AS ?n)", "?s ?p ?o", " GROUP BY ?p")

    def entity_count(self) -> str:
        return self.select(
            "(COUNT(DISTINCT ?e) AS ?n)", "{ ?e ?p ?o } UNION { ?s ?p ?e . FILTER(!isLiteral(?e)) }"
        )
