"""Freebase-shaped graphs for the S-expression differential tests, drawn from the real schema.

Classes and relations come from GrailQA's ``fb_roles`` (domain, relation, range): entity
relations between typed entities, CVT nodes (entities without a name) in the middle of
two-hop facts, and literal relations (``type.datetime``, ``type.int``, ``type.float``) whose
values come from small pools so that ties and equal instants across datatypes occur. Each
(subject, relation) gets at most one literal: Virtuoso keeps literals by value and would fold
equal instants of different datatypes on one subject (see SparqlEndpointStore).
"""
from __future__ import annotations

import gzip
import random
from pathlib import Path

from engine.graph import NAME_RELATION, TYPE_RELATION, XSD, Literal, Triple
from engine.sexpr import tree as t
from engine.sexpr.evaluate import Evaluator
from engine.sexpr.tree import COMPARISONS, to_text, value

TIMES = [
    Literal.make("1990", XSD + "gYear"),
    Literal.make("1990-01-01", XSD + "date"),
    Literal.make("1990-05", XSD + "gYearMonth"),
    Literal.make("1989-12-31T23:59:59", XSD + "dateTime"),
    Literal.make("2001-05-04", XSD + "date"),
    Literal.make("2001-05-04T10:20:30", XSD + "dateTime"),
    Literal.make("-0044", XSD + "gYear"),
    Literal.make("2015", XSD + "gYear"),
]
NUMBERS = [
    Literal.make("42", XSD + "integer"),
    Literal.make("2.5", XSD + "float"),
    Literal.make("2.5", XSD + "double"),
    Literal.make("-1.25", XSD + "decimal"),
    Literal.make("0", XSD + "integer"),
    Literal.make("1990", XSD + "integer"),
    Literal.make("0.75", XSD + "double"),
]
TC_START, TC_END = "government.government_position_held.from", "government.government_position_held.to"


def read_roles(ontology: Path) -> list[tuple[str, str, str]]:
    with gzip.open(ontology / "fb_roles.gz", "rt", encoding="utf-8") as f:
        return [tuple(line.split()) for line in f if len(line.split()) == 3]  # type: ignore[misc]


def freebase_graph(roles: list[tuple[str, str, str]], seed: int, entities: int = 24) -> tuple[list[Triple], dict]:
    """Triples, and what the expression generator needs (relations by kind, classes, ids)."""
    rng = random.Random(seed)
    entity_roles = [r for r in roles if not r[2].startswith("type.") and r[0] != r[2]]
    time_roles = [r for r in roles if r[2] == "type.datetime"]
    number_roles = [r for r in roles if r[2] in ("type.int", "type.float")]
    picked = rng.sample(entity_roles, 5) + rng.sample(time_roles, 2) + rng.sample(number_roles, 2)
    classes = sorted({c for d, _, r in picked for c in (d, r) if not c.startswith("type.")})
    ids = [f"m.0e{i}" for i in range(entities)]
    cvts = [f"m.0cvt{i}" for i in range(6)]
    triples: set[Triple] = set()
    for node in ids:
        for cls in rng.sample(classes, rng.randint(1, 2)):
            triples.add(Triple(node, TYPE_RELATION, cls))
        triples.add(Triple(node, NAME_RELATION, Literal.make(f"Entity {node[4:]}", lang="en")))
    entity_rels = [r for _, r, rng_ in picked if not rng_.startswith("type.")]
    for _ in range(entities * 2):
        triples.add(Triple(rng.choice(ids), rng.choice(entity_rels), rng.choice(ids)))
    for cvt in cvts:  # CVTs: nameless middles, holding the TC interval
        triples.add(Triple(rng.choice(ids), entity_rels[0], cvt))
        triples.add(Triple(cvt, entity_rels[1], rng.choice(ids)))
        triples.add(Triple(cvt, TYPE_RELATION, "government.government_position_held"))
        if rng.random() < 0.8:
            triples.add(Triple(cvt, TC_START, rng.choice(TIMES)))
        if rng.random() < 0.6:
            triples.add(Triple(cvt, TC_END, rng.choice(TIMES)))
    literal_rels = {r: TIMES if rng_ == "type.datetime" else NUMBERS for _, r, rng_ in picked if rng_.startswith("type.")}
    for rel, pool in literal_rels.items():
        for node in rng.sample(ids, entities // 2):
            triples.add(Triple(node, rel, rng.choice(pool)))
    info = {
        "ids": ids,
        "cvts": cvts,
        "classes": classes + ["government.government_position_held"],
        "entity_relations": entity_rels,
        "literal_relations": sorted(literal_rels),
    }
    return sorted(triples, key=repr), info


def expressions(triples: list[Triple], info: dict, seed: int, count: int = 100) -> list[str]:
    """Random S-expressions over the graph, every operator among them; most steps follow
    edges that exist (guided by the evaluator), so that most answers are not empty."""
    rng = random.Random(seed)
    oracle = Evaluator(triples)
    ents, rels, lits = info["ids"], info["entity_relations"], info["literal_relations"]
    incident: dict[str, list[t.Rel]] = {}
    for tr in triples:
        if tr.relation in rels:
            incident.setdefault(tr.object, []).append(t.Relation(tr.relation))  # type: ignore[arg-type]
            incident.setdefault(tr.subject, []).append(t.Reverse(t.Relation(tr.relation)))
    types = {tr.subject: tr.object for tr in triples if tr.relation == TYPE_RELATION}

    def rel(members: set) -> t.Rel:
        options = [r for m in sorted(members, key=repr) for r in incident.get(m, [])]
        if options and rng.random() < 0.85:
            return rng.choice(options)
        r = t.Relation(rng.choice(rels))
        return t.Reverse(r) if rng.random() < 0.4 else r

    def base(depth: int) -> t.Expr:
        roll = rng.random()
        if depth == 0 or roll < 0.1:
            return t.Entity(rng.choice(ents + info["cvts"]))
        if roll < 0.4:
            inner = base(depth - 1)
            return t.Join(rel(oracle.eval(inner)), inner)
        if roll < 0.47:
            return t.Join(t.Relation(rng.choice(lits)), value(rng.choice(TIMES + NUMBERS)))
        if roll < 0.6:
            inner = base(depth - 1)
            found = sorted(types[m] for m in oracle.eval(inner) if m in types)
            return t.And(t.Class(rng.choice(found or info["classes"])), inner)
        if roll < 0.67:
            inner = base(depth - 1)
            return t.And(inner, t.Join(rel(oracle.eval(inner)), base(0)))
        if roll < 0.77:
            pool = TIMES if rng.random() < 0.5 else NUMBERS
            return t.Compare(rng.choice(COMPARISONS), t.Relation(rng.choice(lits)), value(rng.choice(pool)))
        if roll < 0.9:
            path: t.Path = t.Relation(rng.choice(lits))
            arg: t.Expr = t.Class(rng.choice(info["classes"])) if rng.random() < 0.5 else base(depth - 1)
            if rng.random() < 0.4:
                path = t.Chain(rel(oracle.eval(arg)), path)
            return t.Extreme(rng.choice(["ARGMAX", "ARGMIN"]), arg, path)
        cvts = t.Join(t.Reverse(t.Relation(rels[0])), base(0))
        held = rng.choice([cvts, t.Class("government.government_position_held")])
        return t.TimeConstraint(held, t.Relation(TC_START), rng.choice(["1990", "2001", "2010", "NOW"]))

    out = []
    for i in range(count):
        node: t.Top = base(rng.randint(1, 3))
        if i % 7 == 0:
            node = t.Count(node)
        out.append(to_text(node))
    return out
