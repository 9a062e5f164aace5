"""The loader's fast lane: N-Triples lines that an RDF store takes as they are must leave the
store exactly as the full parse does, byte for byte (IRIs as stored, not as decoded to ids)."""
from __future__ import annotations

import random
from urllib.parse import quote

import pytest

from engine.graph import FREEBASE_NS, XSD, Triple
from engine.store import Store
from loaders.load import load_files
from loaders.ntriples import read_ntriples
from sparql.ntriples import CanonicalNTriples

NS = FREEBASE_NS
RDF_KINDS = ["oxigraph", "virtuoso"]

# Lines chosen to sit on either side of the lane's border: each must be stored as the full parse stores it.
TRICKY = [
    f"<{NS}m.0abc> <{NS}people.person.name> <{NS}m.0def> .",  # the plain case
    f"<{NS}Star%20Wars%21> <{NS}directed_by> <{NS}George%20Lucas> .",  # canonical escapes
    f"<{NS}%41bc> <{NS}r> <{NS}x> .",  # an escaped unreserved character: stored as "Abc"
    f"<{NS}a%2fb> <{NS}r> <{NS}x> .",  # lower-case hex
    f"<{NS}Alien%3A%20Resurrection> <{NS}r> <{NS}x> .",  # ':' in an id
    f"<{NS}http%3A%2F%2Fexample.org%2Fx> <{NS}r> <{NS}x> .",  # an id spelled as an absolute IRI
    f"<{NS}Am%C3%A9lie> <{NS}r> <{NS}Amélie> .",  # non-ASCII, escaped and raw
    f"<{NS}m.1> <{NS}%2Ffilm%2Ffilm%2Fgenre> <{NS}m.2> .",  # FB15k-237 relation with '/'
    f"<{NS}m.1> <{NS}%2ffilm%2ffilm%2fgenre> <{NS}m.3> .",  # the same, lower-case hex
    f"<{NS}m.1> <{NS}bad%20relation> <{NS}m.2> .",  # an invalid relation: rejected either way
    f"<{NS}m.1> <{NS}type.object.name> \"Plain name\" .",
    f"<{NS}m.1> <{NS}type.object.name> \"Nom\"@fr .",
    f"<{NS}m.1> <{NS}type.object.name> \"Name\"@EN-us .",  # upper-case tag: lower-cased
    f"<{NS}m.1> <{NS}type.object.name> \"quote \\\" and \\u00e9\" .",  # escapes
    f"<{NS}m.1> <{NS}type.object.name> \"tab\there\" .",  # a raw tab
    f"<{NS}m.1> <{NS}type.object.name> \"typed\"^^<{XSD}string> .",
    f"<{NS}m.1> <{NS}x.date> \"1885\"^^<{XSD}gYear> .",
    f"<{NS}m.1> <{NS}x.date> \"-0500\"^^<{XSD}gYear> .",
    f"<{NS}m.1> <{NS}x.date> \"1885+00:00\"^^<{XSD}gYear> .",  # zone: canonical "Z"
    f"<{NS}m.1> <{NS}x.date> \"2020-01-02\"^^<{XSD}date> .",
    f"<{NS}m.1> <{NS}x.date> \"2020-01\"^^<{XSD}gYearMonth> .",
    f"<{NS}m.1> <{NS}x.date> \"2020-01-02T03:04:05\"^^<{XSD}dateTime> .",
    f"<{NS}m.1> <{NS}x.date> \"2020-01-02T03:04:05.500\"^^<{XSD}dateTime> .",  # fraction: trimmed
    f"<{NS}m.1> <{NS}x.flag> \"true\"^^<{XSD}boolean> .",
    f"<{NS}m.1> <{NS}x.flag> \"1\"^^<{XSD}boolean> .",  # canonical "true"
    f"<{NS}m.1> <{NS}x.n> \"007\"^^<{XSD}integer> .",
    f"<{NS}m.1> <{NS}x.n> \"7\"^^<{XSD}int> .",
    f"<{NS}m.1> <{NS}x.f> \"1.50\"^^<{XSD}float> .",
    f"<{NS}m.1>  <{NS}r>\t<{NS}m.2> .  # spacing and a comment",
    f"<http://example.org/other> <{NS}r> <{NS}m.2> .",  # outside the namespace
    f"_:b1 <{NS}r> _:b2 .",
    "# a comment line",
    f"<{NS}m.1> <{NS}r> <{NS}m.2>",  # no final dot: rejected
]

_ID_CHARS = "abcXYZ019_.-~ :/%é!'()*+,;=?@[]&$#"
_REL_CHARS = "abz09_.-/"
_STRINGS = ["x", "a b", "é", 'q"', "back\\slash", "tab\t", "", "0"]
_TYPED = [
    ("1885", "gYear"), ("1885Z", "gYear"), ("2001-02-03", "date"), ("2001-02", "gYearMonth"),
    ("2001-02-03T04:05:06", "dateTime"), ("2001-02-03T04:05:06Z", "dateTime"), ("false", "boolean"),
    ("TRUE", "boolean"), ("12", "integer"), ("+12", "integer"), ("2.0", "double"), ("x", "string"),
]


def _encode_id(rng: random.Random, node_id: str) -> str:
    """An IRI naming ``node_id``, spelled the canonical way or one of the other ways readers accept."""
    way = rng.randrange(4)
    if way == 0:
        local = quote(node_id, safe="")
    elif way == 1:  # lower-case hex
        local = "".join(c.lower() if i and quote(node_id, safe="")[i - 1] == "%" else c for i, c in enumerate(quote(node_id, safe="")))
    elif way == 2:  # every character escaped, unreserved ones too
        local = "".join(f"%{b:02X}" for b in node_id.encode("utf-8"))
    else:  # as few escapes as the IRI grammar allows
        local = quote(node_id, safe="!$&'()*+,;=:@/~")
    return f"<{NS}{local}>"


def _random_lines(rng: random.Random, count: int) -> list[str]:
    lines = []
    for _ in range(count):
        subject = _encode_id(rng, "".join(rng.choice(_ID_CHARS) for _ in range(rng.randint(1, 6))))
        relation = "".join(rng.choice(_REL_CHARS) for _ in range(rng.randint(1, 5)))
        predicate = f"<{NS}{quote(relation, safe='') if rng.random() < 0.8 else relation}>"
        roll = rng.random()
        if roll < 0.4:
            obj = _encode_id(rng, "".join(rng.choice(_ID_CHARS) for _ in range(rng.randint(1, 6))))
        elif roll < 0.7:
            text = rng.choice(_STRINGS).replace("\\", "\\\\").replace('"', '\\"')
            obj = f'"{text}"' + rng.choice(["", "@en", "@De-AT", "@zh-hans"])
        else:
            value, datatype = rng.choice(_TYPED)
            obj = f'"{value}"^^<{XSD}{datatype}>'
        lines.append(f"{subject} {predicate} {obj} .")
    return lines


def _stored(store: Store) -> set[tuple]:
    """Every stored triple as the store spells it: raw IRI text, not ids."""
    rows = store.query(
        "SELECT (STR(?s) AS ?S) (STR(?p) AS ?P) (isIRI(?o) AS ?I) (STR(?o) AS ?O) (DATATYPE(?o) AS ?D) (LANG(?o) AS ?L) "
        "WHERE { ?s ?p ?o }"
    ).rows
    return {tuple(str(v) for v in row) for row in rows}


@pytest.mark.parametrize("kind", RDF_KINDS)
def test_fast_lane_stores_exactly_what_the_full_parse_stores(kind, make_store, tmp_path):
    lines = TRICKY + _random_lines(random.Random(7), 600)
    path = tmp_path / "kb.nt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    fast = make_store(kind)
    report = load_files(fast, path, batch_size=97, progress=False, rejects_path=tmp_path / "rejects.tsv")
    full = make_store(kind)
    full.add_triples(item for item in read_ntriples(path) if isinstance(item, Triple))

    assert _stored(fast) == _stored(full)
    assert fast.count_triples() == full.count_triples() == report.loaded
    assert report.rejected == sum(1 for item in read_ntriples(path) if not isinstance(item, Triple))
    lane = fast.canonical_ntriples(NS)
    assert lane is not None
    taken = sum(lane.accepts(line) for line in lines)
    assert 50 < taken < len(lines) - 50  # both ways were well exercised


def test_lane_border():
    lane = CanonicalNTriples(NS)
    assert lane.accepts(TRICKY[0]) and lane.accepts(TRICKY[1]) and lane.accepts(TRICKY[7])
    for line in (TRICKY[2], TRICKY[3], TRICKY[4], TRICKY[5], TRICKY[6], TRICKY[8], TRICKY[9], TRICKY[12]):
        assert not lane.accepts(line), line
    assert CanonicalNTriples("http://example.org/").accepts(TRICKY[0]) is False


def test_stores_without_a_lane_or_another_namespace_take_the_full_parse(make_store, tmp_path):
    assert make_store("oxigraph").canonical_ntriples("http://example.org/") is None
    path = tmp_path / "kb.nt"
    path.write_text("<http://example.org/a> <http://example.org/r> <http://example.org/b> .\n", encoding="utf-8")
    store = make_store("oxigraph")
    report = load_files(store, path, namespace="http://example.org/", progress=False)
    assert report.loaded == 1
    # ids are local names under the namespace given to the loader, stored under the store's own
    assert [(e.src, e.relation, e.dst) for e in store.expand(["a"]).edges] == [("a", "r", "b")]


def test_the_bolt_store_has_no_lane(make_store):
    assert make_store("bolt").canonical_ntriples(NS) is None
