"""Freebase-shaped graphs of a chosen size, drawn from the real Freebase schema.

The schema comes from GrailQA's ontology files in ``freebase-ontology/`` of the datasets directory:
``fb_roles`` (``domain relation range``), ``fb_types`` (``class meta.subclassOf parent``) and
``reverse_properties`` (pairs of properties Freebase stores in both directions). From them:

- topic classes are the classes ``fb_types`` places in the topic hierarchy; CVT (mediator)
  classes are the classes ``fb_roles`` uses that ``fb_types`` does not know — ``film.performance``,
  ``people.marriage``, ``measurement_unit.dated_integer`` …; ranges ``type.int``, ``type.datetime``
  … are typed literals;
- only the curated "commons" domains are used (``base.*``, ``user.*`` and the system domains are
  left out, as most KGQA work leaves them out).

A graph has the shape of a Freebase dump: every topic entity has a MID, an English
``type.object.name`` and ``type.object.type`` edges to its class and that class's ancestors; a
property's subject is an instance of its domain and its object an instance of its range (a
subclass counts) or a literal of the range's datatype; a property whose range is a CVT class
creates a fresh nameless CVT node that carries that class's own properties; properties that
have a reverse are stored in both directions, as in Freebase. Degrees are heavy-tailed: each
range pool draws its objects with a Zipf popularity (hubs such as a country or a genre), and a
subject's number of values per property follows a Pareto tail.

Hubs: the largest node is the ``common.topic`` class (one type edge per topic entity: 36k edges
at 1M triples, 3.6 %), the busiest value node about 8k edges at 1M; both grow linearly, so a
10M graph has no node near the million-edge hubs of the real Freebase (a gender, a country,
the US dollar), which there are ~0.1 % of 1.9B triples. ``hub_edges=D`` adds a hub pool: D
nameless stub nodes, each with one ``measurement_unit.dated_money_value.currency`` edge to the
most popular currency (a money value whose other facts are not in the sample), so that one node
holds at least D edges at any size; the regular part is then exactly the graph of ``size - D``.
The default (0) leaves every existing graph unchanged.
"""
from __future__ import annotations

import gzip
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from engine.graph import NAME_RELATION, TYPE_RELATION, XSD, Literal, Triple
from loaders.datasets import data_dir

#: Freebase's value types and the literal each becomes; ``None`` is a plain string
LITERAL_RANGES: dict[str, str | None] = {
    "type.datetime": "date-like",
    "type.int": XSD + "integer",
    "type.float": XSD + "float",
    "type.boolean": XSD + "boolean",
    "type.text": "text@en",
    "type.rawstring": None,
    "type.uri": None,
    "type.enumeration": None,
}
TOPIC = "common.topic"
# Domains outside the curated commons: user bases and Freebase's own bookkeeping.
_SKIPPED = ("base.", "user.", "freebase.", "m.", "kg.", "dataworld.", "common.", "type.", "pipeline.", "en.")
_MID_ALPHABET = "0123456789bcdfghjklmnpqrstvwxyz_"
_SYLLABLES = [a + b for a in "bcdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ar", "en", "is", "on")]


@dataclass(frozen=True)
class Property:
    name: str
    domain: str
    range: str

    @property
    def literal(self) -> bool:
        return self.range in LITERAL_RANGES


@dataclass
class Schema:
    """The commons part of the Freebase schema."""

    properties: dict[str, Property]
    parents: dict[str, tuple[str, ...]]  # every class used → its direct parents in the schema
    cvt: frozenset[str]
    reverse: dict[str, str]  # property → its reverse (both ways)
    by_domain: dict[str, list[Property]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p in self.properties.values():
            self.by_domain.setdefault(p.domain, []).append(p)
        children: dict[str, list[str]] = {}
        for cls, parents in self.parents.items():
            for parent in parents:
                children.setdefault(parent, []).append(cls)
        self._children = children

    @property
    def classes(self) -> list[str]:
        return sorted(self.parents)

    def ancestors(self, cls: str) -> tuple[str, ...]:
        """The class itself and every class above it, nearest first."""
        return _closure(cls, self.parents)

    def descendants(self, cls: str) -> tuple[str, ...]:
        """The class itself and every class below it."""
        return _closure(cls, {k: tuple(v) for k, v in self._children.items()})

    def properties_of(self, cls: str) -> list[Property]:
        """Properties an instance of ``cls`` may carry: its own and its ancestors'."""
        return [p for c in self.ancestors(cls) for p in self.by_domain.get(c, ())]


def _closure(start: str, edges: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    seen = {start: None}
    stack = [start]
    while stack:
        for nxt in edges.get(stack.pop(), ()):
            if nxt not in seen:
                seen[nxt] = None
                stack.append(nxt)
    return tuple(seen)


def _kept(cls: str) -> bool:
    return cls == TOPIC or not cls.startswith(_SKIPPED)


@cache
def load_schema(directory: Path | None = None) -> Schema:
    """Parse the ontology files (commons domains only); by default those of the datasets directory."""
    folder = directory or data_dir() / "freebase-ontology"

    def lines(name: str) -> Iterator[list[str]]:
        with gzip.open(folder / name, "rt", encoding="utf-8") as f:
            for line in f:
                yield line.split()

    properties: dict[str, Property] = {}
    for parts in lines("fb_roles.gz"):
        if len(parts) != 3:  # two lines of the file are glued together; skip them
            continue
        domain, name, rng = parts
        if _kept(domain) and domain != TOPIC and (rng in LITERAL_RANGES or _kept(rng)):
            properties[name] = Property(name, domain, rng)
    topic_parents: dict[str, set[str]] = {}
    for parts in lines("fb_types.gz"):
        if len(parts) >= 3 and parts[1] == "meta.subclassOf":
            topic_parents.setdefault(parts[0], set()).add(parts[2])
    used = {p.domain for p in properties.values()} | {p.range for p in properties.values() if not p.literal}
    cvt = frozenset(c for c in used if c not in topic_parents and c != TOPIC)
    parents: dict[str, tuple[str, ...]] = {TOPIC: ()}
    for cls in sorted(used | {TOPIC}):
        if cls in cvt:
            parents[cls] = ()
        elif cls != TOPIC:
            parents[cls] = tuple(sorted(p for p in topic_parents.get(cls, ()) if p in used or p == TOPIC)) or (TOPIC,)
    reverse: dict[str, str] = {}
    for parts in lines("reverse_properties.gz"):
        if len(parts) == 2 and parts[0] in properties and parts[1] in properties:
            reverse[parts[0]] = parts[1]
            reverse[parts[1]] = parts[0]
    return Schema(properties, parents, cvt, reverse)


def mid(n: int) -> str:
    """A Freebase-style MID (``m.0…``) for a counter."""
    digits = []
    while True:
        n, r = divmod(n, 32)
        digits.append(_MID_ALPHABET[r])
        if n == 0:
            break
    return "m.0" + "".join(reversed(digits))


class _ZipfPool:
    """Draws members of a pool with Zipf popularity over a random ranking (a few hubs)."""

    def __init__(self, members: np.ndarray, exponent: float, rng: np.random.Generator) -> None:
        self.members = rng.permutation(members)
        weights = 1.0 / np.arange(1, len(members) + 1, dtype=np.float64) ** exponent
        self.cdf = np.cumsum(weights) / weights.sum()
        self.rng = rng
        self.buffer: list[int] = []

    def draw(self) -> int:
        if not self.buffer:
            picks = np.searchsorted(self.cdf, self.rng.random(4096), side="right")
            self.buffer = self.members[np.minimum(picks, len(self.members) - 1)].tolist()
        return self.buffer.pop()


@dataclass
class GeneratedGraph:
    """What :func:`generate` produced (filled in as the triples stream out)."""

    triples: int = 0
    entities: int = 0
    cvts: int = 0
    seed: int = 0
    hub: str | None = None  # the hub-pool node (``hub_edges`` > 0)
    hub_edges: int = 0  # stub edges it received


# Rough relative sizes of Freebase's largest types (people and recordings by the million, films
# by the hundred thousand); every other class gets a share that grows with its own properties.
BIG_CLASSES = {
    "music.recording": 10.0,
    "people.person": 3.0,
    "book.book_edition": 2.0,
    "music.album": 1.5,
    "location.location": 1.0,
    "organization.organization": 0.8,
    "book.book": 0.8,
    "tv.tv_series_episode": 0.5,
    "film.film": 0.2,
}
BIG_SHARE = 0.5  # of all entities
PARETO_TAIL = 1.6  # values per (subject, property): P(n >= k) = k^-1.6
MAX_VALUES = 300  # per (subject, property)
MAX_CVTS = 50  # per (subject, CVT property)
CVT_FILL = 0.8  # chance that a CVT carries each of its class's properties
HUB_PROPERTY = "measurement_unit.dated_money_value.currency"  # the hub pool's stub edges (to a currency)


class FreebaseGenerator:
    """Streams a Freebase-shaped graph of about ``size`` triples.

    First every topic entity's name and types, then each entity's facts in a random order
    until ``size`` is reached (entities left without facts are sparse topics, as in Freebase).
    """

    def __init__(
        self, size: int, seed: int = 0, schema: Schema | None = None, zipf: float = 1.05, hub_edges: int = 0
    ) -> None:
        if not 0 <= hub_edges < size:
            raise ValueError(f"hub_edges={hub_edges} must be at least 0 and below the size ({size})")
        self.schema = schema or load_schema()
        if hub_edges and HUB_PROPERTY not in self.schema.properties:
            raise ValueError(f"hub_edges needs the property {HUB_PROPERTY} in the schema")
        self.size = size
        self.seed = seed
        self.zipf = zipf
        self.hub_edges = hub_edges
        self.info = GeneratedGraph(seed=seed)

    def _class_weights(self, topic: list[str], nrng: np.random.Generator) -> np.ndarray:
        own = {c: len(self.schema.by_domain.get(c, ())) for c in topic}
        weights = np.array([1 + own[c] for c in topic], dtype=np.float64) * nrng.lognormal(0.0, 1.0, len(topic))
        big = np.array([BIG_CLASSES.get(c, 0.0) for c in topic])
        small = big == 0
        weights[small] *= (1 - BIG_SHARE) / weights[small].sum()
        weights[~small] = BIG_SHARE * big[~small] / big.sum()
        return weights

    def _expected_triples(self, cls: str, fill: dict[str, float]) -> float:
        """Expected triples of one entity of ``cls`` (identity + facts + the CVTs it creates)."""
        schema = self.schema
        many = sum(k ** -PARETO_TAIL for k in range(1, MAX_VALUES + 1))
        few = sum(k ** -PARETO_TAIL for k in range(1, MAX_CVTS + 1))
        total = 1.0 + len(schema.ancestors(cls))
        for p in schema.properties_of(cls):
            back = p.name in schema.reverse and not p.literal
            if p.range in schema.cvt:
                inner = sum(
                    CVT_FILL * (1 + (q.name in schema.reverse and not q.literal))
                    for q in schema.properties_of(p.range)
                    if q.name != schema.reverse.get(p.name) and q.range not in schema.cvt
                )
                total += fill[p.name] * few * (2 + back + inner)
            else:
                total += fill[p.name] * many * (1 + back)
        return total

    def __iter__(self) -> Iterator[Triple]:
        schema = self.schema
        rand = random.Random(self.seed)
        nrng = np.random.default_rng(self.seed)
        topic = [c for c in schema.classes if c not in schema.cvt and c != TOPIC]
        fill = {p: float(nrng.beta(0.5, 3.0)) for p in sorted(schema.properties)}
        weights = self._class_weights(topic, nrng)
        per_entity = float(sum(w * self._expected_triples(c, fill) for c, w in zip(topic, weights)))
        regular = self.size - self.hub_edges  # the hub pool's stubs take the rest
        n_entities = max(1, round(regular / per_entity))
        counts = nrng.multinomial(n_entities, weights)
        class_of = np.repeat(np.arange(len(topic)), counts).tolist()
        starts = dict(zip(topic, (np.cumsum(counts) - counts).tolist()))
        sizes = dict(zip(topic, counts.tolist()))
        self.info.entities = n_entities
        pools: dict[str, _ZipfPool | None] = {}
        cvt_ids = itertools.count(n_entities)

        def pool(cls: str) -> _ZipfPool | None:
            if cls not in pools:
                ranges = [np.arange(starts[c], starts[c] + sizes[c]) for c in schema.descendants(cls) if sizes.get(c)]
                pools[cls] = _ZipfPool(np.concatenate(ranges), self.zipf, nrng) if ranges else None
            return pools[cls]

        def facts(subject: str, cls: str, single: bool, skip: str | None) -> Iterator[Triple]:
            """Values of ``subject``'s properties (a CVT's are single-valued), except ``skip``."""
            for prop in schema.properties_of(cls):
                if prop.name == skip or prop.range in schema.cvt:
                    continue
                if rand.random() >= (CVT_FILL if single else fill[prop.name]):
                    continue
                rev = schema.reverse.get(prop.name)
                for _ in range(1 if single else min(int(rand.paretovariate(PARETO_TAIL)), MAX_VALUES)):
                    if prop.literal:
                        yield Triple(subject, prop.name, _literal(prop.range, rand))
                        continue
                    members = pool(prop.range)
                    if members is None:
                        break
                    obj = mid(members.draw())
                    if obj != subject:
                        yield Triple(subject, prop.name, obj)
                        if rev is not None:
                            yield Triple(obj, rev, subject)

        def cvts(subject: str, cls: str) -> Iterator[Triple]:
            """Nameless CVT nodes hanging off ``subject``, each with its own facts."""
            for prop in schema.properties_of(cls):
                if prop.range not in schema.cvt or rand.random() >= fill[prop.name]:
                    continue
                rev = schema.reverse.get(prop.name)
                for _ in range(min(int(rand.paretovariate(PARETO_TAIL)), MAX_CVTS)):
                    node = mid(next(cvt_ids))
                    self.info.cvts += 1
                    yield Triple(node, TYPE_RELATION, prop.range)
                    yield Triple(subject, prop.name, node)
                    if rev is not None:
                        yield Triple(node, rev, subject)
                    yield from facts(node, prop.range, True, rev)

        emitted = 0
        for e in range(n_entities):
            node = mid(e)
            yield Triple(node, NAME_RELATION, Literal(_name(rand), None, "en"))
            for c in schema.ancestors(topic[class_of[e]]):
                yield Triple(node, TYPE_RELATION, c)
            emitted += 1 + len(schema.ancestors(topic[class_of[e]]))
        for e in nrng.permutation(n_entities).tolist():
            if emitted >= regular:
                break
            cls = topic[class_of[e]]
            for t in itertools.chain(cvts(mid(e), cls), facts(mid(e), cls, False, None)):
                emitted += 1
                yield t
        if self.hub_edges:
            for t in self._hub_pool(pool(schema.properties[HUB_PROPERTY].range), cvt_ids, rand):
                emitted += 1
                yield t
        self.info.triples = emitted

    def _hub_pool(self, members: _ZipfPool | None, ids: Iterator[int], rand: random.Random) -> Iterator[Triple]:
        """``hub_edges`` triples at the hub: stubs pointing at the pool's most popular member,
        or at a fresh, named currency when the graph has none (its name and types count)."""
        prop = self.schema.properties[HUB_PROPERTY]
        stubs = self.hub_edges
        if members is not None:
            hub = mid(int(members.members[0]))
        else:
            hub = mid(next(ids))
            classes = self.schema.ancestors(prop.range)
            stubs -= 1 + len(classes)
            yield Triple(hub, NAME_RELATION, Literal(_name(rand), None, "en"))
            for c in classes:
                yield Triple(hub, TYPE_RELATION, c)
        self.info.hub = hub
        self.info.hub_edges = stubs
        for _ in range(stubs):
            yield Triple(mid(next(ids)), prop.name, hub)


def _name(rand: random.Random) -> str:
    words = [
        "".join(rand.choice(_SYLLABLES) for _ in range(rand.randint(2, 3))).capitalize()
        for _ in range(rand.randint(1, 3))
    ]
    return " ".join(words)


def _literal(rng_type: str, rand: random.Random) -> Literal:
    kind = LITERAL_RANGES[rng_type]
    if kind == "date-like":
        year = rand.randint(1700, 2015)
        roll = rand.random()
        if roll < 0.5:
            return Literal(str(year), XSD + "gYear")
        if roll < 0.65:
            return Literal(f"{year}-{rand.randint(1, 12):02d}", XSD + "gYearMonth")
        return Literal(f"{year}-{rand.randint(1, 12):02d}-{rand.randint(1, 28):02d}", XSD + "date")
    if kind == XSD + "integer":
        return Literal(str(int(rand.paretovariate(1.2))), kind)
    if kind == XSD + "float":
        return Literal.make(f"{rand.lognormvariate(3, 2):.2f}", kind)
    if kind == XSD + "boolean":
        return Literal("true" if rand.random() < 0.5 else "false", kind)
    if kind == "text@en":
        return Literal(_name(rand).lower() + " " + _name(rand).lower(), None, "en")
    return Literal(_name(rand).lower().replace(" ", "_"))
