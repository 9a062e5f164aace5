"""Random graphs that exercise every corner of the walk semantics.

Self-loops, reciprocal edges, parallel relations between one pair, typed and language-tagged
literals, names and types, and ids that are awkward in IRIs and queries.
"""
from __future__ import annotations

import random

from engine.graph import NAME_RELATION, TYPE_RELATION, XSD, Literal, Triple

AWKWARD_IDS = ["m.0abc", "The Prowler", "Évian", "x'y\"z", "a/b#c?d", "{}`$", "100%"]
RELATIONS = ["r", "s", "people.person.spouse", "/film/film/genre", "t-x"]
NAMES = ["Alpha", "alphabet", "Beta Ray", "Gamma", "ALPHA", "Delta-ä"]
LITERALS = [
    Literal.make("1990", XSD + "gYear"),
    Literal.make("42", XSD + "integer"),
    Literal.make("7", XSD + "int"),
    Literal.make("2.5", XSD + "float"),
    Literal.make("2001-05-04", XSD + "date"),
    Literal.make("true", XSD + "boolean"),
    Literal.make("plain text"),
    Literal.make("chat", lang="fr"),
]


def random_graph(seed: int, nodes: int = 14, edges: int = 40) -> list[Triple]:
    rng = random.Random(seed)
    ids = [f"n{i}" for i in range(nodes - 4)] + rng.sample(AWKWARD_IDS, 4)
    triples: set[Triple] = set()
    for _ in range(edges):
        s, o = rng.choice(ids), rng.choice(ids)
        r = rng.choice(RELATIONS)
        triples.add(Triple(s, r, o))
        roll = rng.random()
        if roll < 0.1:
            triples.add(Triple(o, r, s))  # reciprocal
        elif roll < 0.2:
            triples.add(Triple(s, r, s))  # self-loop
        elif roll < 0.3:
            triples.add(Triple(s, rng.choice(RELATIONS), o))  # parallel relation
    for node in rng.sample(ids, nodes // 3):
        triples.add(Triple(node, rng.choice(RELATIONS), rng.choice(LITERALS)))
        triples.add(Triple(node, NAME_RELATION, Literal.make(rng.choice(NAMES), lang=rng.choice(["en", None, "de"]))))
        triples.add(Triple(node, TYPE_RELATION, rng.choice(["film.film", "people.person"])))
    return sorted(triples, key=repr)


def node_ids(triples: list[Triple]) -> list[str]:
    found = {t.subject for t in triples} | {t.object for t in triples if isinstance(t.object, str)}
    return sorted(found)


#: literals no random graph holds, each equal by value or text to one that graphs do hold
ABSENT_LITERALS = [
    Literal.make("1990-01-01", XSD + "date"),  # the instant of 1990^^gYear
    Literal.make("42", XSD + "decimal"),  # the value of 42^^integer
    Literal.make("2.5", XSD + "double"),
    Literal.make("chat", lang="en"),
    Literal.make("chat"),
    Literal.make("1"),
    Literal.make("false", XSD + "boolean"),
]


def literal_objects(triples: list[Triple]) -> list[Literal]:
    """The literals a graph holds as objects, in a stable order."""
    return sorted({t.object for t in triples if isinstance(t.object, Literal)}, key=repr)
