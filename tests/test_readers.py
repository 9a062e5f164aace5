"""The dump and dataset readers: hand-written fixtures first, then the real files in ../shared/data."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from engine.errors import InvalidInputError, ParseError
from engine.graph import XSD, Literal, Triple
from loaders.datasets import load_dataset
from loaders.formats import FORMATS, detect_format, read_triples
from loaders.freebase import read_freebase
from loaders.ntriples import read_ntriples
from loaders.questions import (
    Question,
    gold_hops,
    metaqa_relation_path,
    read_metaqa_questions,
    read_pathquestion,
    read_rog_questions,
)
from loaders.source import Reject, Source
from loaders.tabular import (
    normalise_mid,
    read_entity_names,
    read_metaqa,
    read_rog,
    read_tsv,
)

DATA = Path(__file__).parent / "data"
NS = "http://rdf.freebase.com/ns/"


def split(items) -> tuple[list[Triple], list[Reject]]:
    items = list(items)
    return [i for i in items if isinstance(i, Triple)], [i for i in items if isinstance(i, Reject)]


def write(path: Path, text: str, compress: bool = False) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def reject_lines(rejects: list[Reject]) -> list[int]:
    return [r.line_no for r in rejects]


# ---------------------------------------------------------------------------- N-Triples

SAMPLE_NT = [
    Triple("m.0abc", "people.person.place_of_birth", "m.0xyz"),
    Triple("m.0abc", "type.object.name", Literal('Ada "the" Lovelace\tII\\n', None, "en-gb")),
    Triple("m.0abc", "people.person.height_meters", Literal("1.7", XSD + "decimal")),
    Triple("_:b0", "common.topic.alias", Literal("caf\u00e9 \U0001f600 \U0001f600")),
    Triple("m.0\u00e9", "film.film.genre", "http://example.org/genre/Drama"),
    Triple("http://example.org/x", "common.topic.webpage", "_:b1"),
    Triple("m.0xyz", "location.location.area", Literal("42", XSD + "integer")),
    Triple("m.0xyz", "common.topic.description", Literal("")),
]


def test_ntriples_sample():
    triples, rejects = split(read_ntriples(DATA / "sample.nt"))
    assert rejects == []
    assert triples == SAMPLE_NT


def test_ntriples_gzip_by_magic_and_by_suffix(tmp_path):
    text = (DATA / "sample.nt").read_text(encoding="utf-8")
    for name in ("sample.nt.gz", "sample-without-suffix"):
        path = write(tmp_path / name, text, compress=True)
        assert list(read_ntriples(path)) == SAMPLE_NT


def test_ntriples_crlf_bom_and_minimal_forms(tmp_path):
    path = write(
        tmp_path / "x.nt",
        "\ufeff<http://e.org/s> <http://e.org/p> <http://e.org/o> .\r\n"
        "\t_:s<http://e.org/p>_:o.\r\n"
        '<http://e.org/s> <http://e.org/p> "v"@en-US . # comment\r\n'
        "   # an indented comment\r\n",
    )
    triples, rejects = split(read_ntriples(path, namespace="http://e.org/"))
    assert rejects == []
    assert triples == [Triple("s", "p", "o"), Triple("_:s", "p", "_:o"), Triple("s", "p", Literal("v", None, "en-us"))]


def test_ntriples_escapes_in_iris_and_percent_decoding(tmp_path):
    path = write(
        tmp_path / "x.nt",
        "<http://e.org/caf\\u00E9> <http://e.org/p> <http://e.org/a%20b> .\n"
        "<http://e.org/s> <http://e.org/p> <http://other.org/\\U0001F600> .\n",
    )
    triples, _ = split(read_ntriples(path, namespace="http://e.org/"))
    assert triples == [Triple("caf\u00e9", "p", "a b"), Triple("s", "p", "http://other.org/\U0001f600")]


def test_ntriples_bad_lines_are_rejected_with_their_line_numbers(tmp_path):
    good = '<http://e.org/s> <http://e.org/p> "ok" .'
    bad = {
        2: "<http://e.org/s> <http://e.org/p> <http://e.org/o>",  # no final '.'
        3: "<s> <http://e.org/p> <http://e.org/o> .",  # relative IRI
        4: '<http://e.org/s> <http://e.org/p> "bad \\z escape" .',
        5: '"lit" <http://e.org/p> <http://e.org/o> .',  # literal subject
        6: '<http://e.org/s> <http://e.org/p> "abc"^^<http://www.w3.org/2001/XMLSchema#integer> .',  # ill-typed
        7: "<http://e.org/s> <http://elsewhere.org/p> <http://e.org/o> .",  # predicate outside the namespace
        8: "<http://e.org/a b> <http://e.org/p> <http://e.org/o> .",  # space in IRI
        9: '<http://e.org/s> <http://e.org/p> "unterminated .',
        10: '<http://e.org/s> <http://e.org/p> "\\uD800 alone" .',  # lone surrogate
        11: "<http://e.org/s> <http://e.org/p%20q> <http://e.org/o> .",  # relation with a space
        12: '<http://e.org/s> <http://e.org/p> "x"@ .',
        13: "<http://e.org/s> <http://e.org/p> <http://e.org/o> . trailing",
        14: '<http://e.org/s> <http://e.org/p> "x"^^<integer> .',  # relative datatype
        15: "<http://e.org/s> <http://e.org/p> <http://e.org/\\n> .",  # ECHAR not allowed in IRIs
        16: "<http://e.org/%0A> <http://e.org/p> <http://e.org/o> .",  # control character in an id
    }
    lines = [good] + [bad[n] for n in range(2, 17)] + [good]
    path = tmp_path / "x.nt"
    data = "\n".join(lines).encode() + b"\n" + b'<http://e.org/s> <http://e.org/p> "\xff" .\n' + good.encode()
    path.write_bytes(data)
    triples, rejects = split(read_ntriples(path, namespace="http://e.org/"))
    assert triples == [Triple("s", "p", Literal("ok"))] * 3
    assert reject_lines(rejects) == list(range(2, 17)) + [18]
    for r in rejects[:-1]:
        assert r.text == bad[r.line_no]
        assert r.reason
    assert "final '.'" in rejects[0].reason
    assert "relative IRI" in rejects[1].reason
    assert "outside the namespace" in rejects[5].reason
    assert "UTF-8" in rejects[-1].reason


def test_truncated_gzip_keeps_what_came_before(tmp_path):
    lines = "".join(f"<{NS}m.{i}> <{NS}r> <{NS}m.x> .\n" for i in range(2000))
    data = gzip.compress(lines.encode())
    path = tmp_path / "cut.nt.gz"
    path.write_bytes(data[: len(data) // 2])
    triples, rejects = split(read_ntriples(path))
    assert 0 < len(triples) < 2000
    assert triples[0] == Triple("m.0", "r", "m.x")
    assert len(rejects) == 1 and rejects[0].line_no == len(triples) + 1
    assert "cannot be read" in rejects[0].reason


def test_gz_suffix_on_plain_text_is_refused(tmp_path):
    path = write(tmp_path / "plain.nt.gz", "<a:b> <a:c> <a:d> .\n")
    with pytest.raises(InvalidInputError, match="not gzip"):
        list(read_ntriples(path))


def test_missing_file(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        list(read_ntriples(tmp_path / "nope.nt"))


# ---------------------------------------------------------------------------- Freebase

def test_freebase_default_filters():
    triples, rejects = split(read_freebase(DATA / "freebase-rdf-sample"))
    assert triples == [
        Triple("m.0abc", "type.object.type", "people.person"),
        Triple("m.0abc", "type.object.name", Literal("Ada Lovelace", None, "en")),
        Triple("m.0abc", "common.topic.alias", Literal("Ada", None, "en-gb")),
        Triple("m.0abc", "people.person.date_of_birth", Literal("1815-12-10", XSD + "date")),
        Triple("m.0abc", "base.ada.fan.club", "m.0fan"),
        Triple("m.0abc", "user.jdoe.default_domain.note", Literal("x")),
        Triple("m.0xyz", "type.object.type", "location.location"),
        Triple("m.0xyz", "type.object.name", Literal("Lon\tdon", None, "en")),
    ]
    assert reject_lines(rejects) == [12, 16, 17]
    assert "final '.'" in rejects[0].reason
    assert "ill-typed" in rejects[1].reason


def test_freebase_options():
    triples, _ = split(
        read_freebase(DATA / "freebase-rdf-sample", languages=None, drop_domains=("base", "user"), drop_predicates=())
    )
    relations = [(t.relation, t.object) for t in triples]
    assert ("type.object.name", Literal("Ada Lovelace", None, "fr")) in relations
    assert ("type.object.key", Literal("/en/ada_lovelace")) in relations
    assert not any(r.startswith(("base.", "user.")) for r, _ in relations)
    # rdf:type, rdfs:label and key:en are outside the namespace: dropped whatever the options
    assert len(triples) == 8  # the 8 default triples, + fr name + key, - base. - user.


def test_freebase_languages_option():
    for languages in (("fr",), "fr", ["FR"]):
        triples, _ = split(read_freebase(DATA / "freebase-rdf-sample", languages=languages))
        langs = {t.object.lang for t in triples if isinstance(t.object, Literal)}
        assert langs == {None, "fr"}
    triples, _ = split(read_freebase(DATA / "freebase-rdf-sample", drop_domains="base"))
    assert not any(t.relation.startswith("base.") for t in triples)


def test_freebase_bad_prefix_line_and_empty_fields(tmp_path):
    path = write(tmp_path / "fb", "@prefix ns <http://rdf.freebase.com/ns/> .\n\t\t\t.\n")
    triples, rejects = split(read_freebase(path))
    assert triples == [] and reject_lines(rejects) == [1, 2]


# ---------------------------------------------------------------------------- MetaQA, TSV, names

def test_metaqa_kb():
    triples, rejects = split(read_metaqa(DATA / "metaqa-kb-sample.txt"))
    assert triples == [
        Triple("The Prowler", "starred_actors", "Evelyn Keyes"),
        Triple("The Prowler", "release_year", "1951"),  # years stay entity ids
        Triple("The Prowler", "has_imdb_rating", "good"),
        Triple("The Prowler", "starred_actors", "Evelyn Keyes"),
        Triple("Kismet", "has_genre", "Musical"),
    ]
    assert reject_lines(rejects) == [4, 5, 7, 8]
    assert rejects[0].text == "The Prowler|directed_by"
    assert "invalid relation name" in rejects[2].reason
    assert "invalid relation name ''" in rejects[3].reason


def test_tsv_normalises_mids_and_keeps_relations_verbatim():
    triples, rejects = split(read_tsv(DATA / "triples-sample.tsv"))
    assert triples == [
        Triple("m.027rn", "/location/country/form_of_government", "m.06cx9"),
        Triple("m.017dcd", "/tv/tv_program/regular_cast./tv/regular_tv_appearance/actor", "g.11b6t"),
        Triple("ludwig_ii_of_bavaria", "parents", "maximilian_ii_of_bavaria"),
    ]
    assert reject_lines(rejects) == [4, 6]


def test_normalise_mid():
    assert normalise_mid("/m/027rn") == "m.027rn"
    assert normalise_mid("/g/11b6t") == "g.11b6t"
    assert normalise_mid("m.027rn") == "m.027rn"
    assert normalise_mid("/film/film") == "/film/film"


def test_entity_names():
    triples, rejects = split(read_entity_names(DATA / "entity2text-sample.txt"))
    assert triples == [
        Triple("m.06rf7", "type.object.name", Literal("Schleswig-Holstein", None, "en")),
        Triple("m.0c94fn", "type.object.name", Literal("Gary Rydstrom", None, "en")),
    ]
    assert reject_lines(rejects) == [3, 4, 5]


# ---------------------------------------------------------------------------- RoG

ROG_GRAPH = [
    Triple("Justin Bieber", "people.person.sibling_s", "m.0gxnnwc"),
    Triple("m.0gxnnwc", "people.sibling_relationship.sibling", "Jaxon Bieber"),
    Triple("m.0gxnnwc", "people.sibling_relationship.sibling", "Jaxon Bieber"),
    Triple("m.0gxnnwc", "people.sibling_relationship.sibling", "Justin Bieber"),
    Triple("Canada", "base.locations.countries.continent", "North America"),
]


def test_rog_jsonl_graph_triples():
    triples, rejects = split(read_rog(DATA / "rog-sample.jsonl"))
    assert triples == ROG_GRAPH
    assert reject_lines(rejects) == [2, 2, 4]
    assert json.loads(rejects[0].text) == ["Jaxon Bieber", "bad relation", "x"]
    assert "WebQTrn-1" in rejects[0].reason


def test_rog_ids_must_be_valid_unicode(tmp_path):
    path = write(tmp_path / "x.jsonl", '{"id": "q", "graph": [["a\\ud800", "r", "b"], ["a", "r", "b\\u0007"], ["a", "r", "b"]]}\n')
    triples, rejects = split(read_rog(path))
    assert triples == [Triple("a", "r", "b")]
    assert [r.line_no for r in rejects] == [1, 1]
    assert "not valid Unicode" in rejects[0].reason and "invalid node id" in rejects[1].reason


def test_a_rog_line_nested_without_end_is_rejected_and_the_rest_read(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    path = write(tmp_path / "x.jsonl", '{"id": "q", "graph": ' + deep + '}\n{"id": "r", "graph": [["a", "r", "b"]]}\n')
    triples, rejects = split(read_rog(path))
    assert triples == [Triple("a", "r", "b")]
    assert [r.line_no for r in rejects] == [1] and "nested too deep" in rejects[0].reason


def test_rog_questions_jsonl():
    with pytest.raises(ParseError, match="rog-sample.jsonl:4"):
        read_rog_questions(DATA / "rog-sample.jsonl")


def rog_rows() -> list[dict]:
    rows = []
    for line in (DATA / "rog-sample.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    for row in rows:
        row["answer"] = [row["answer"]] if isinstance(row["answer"], str) else row["answer"]
        row["graph"] = [g for g in row["graph"] if len(g) == 3]
    return rows


def test_rog_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = rog_rows()
    path = tmp_path / "train-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert detect_format(path) == "rog"
    triples, rejects = split(read_rog(path))
    assert triples == ROG_GRAPH
    assert reject_lines(rejects) == [2]  # the bad relation, in row 2
    questions = read_rog_questions(path)
    assert questions[0] == Question(
        id="WebQTrn-0",
        question="what is the name of justin bieber brother",
        answers=["Jaxon Bieber"],
        topic_entities=["Justin Bieber"],
        answer_entities=["Jaxon Bieber"],
    )
    assert [q.id for q in questions] == ["WebQTrn-0", "WebQTrn-1", "WebQTrn-3"]
    assert questions[2].answers == ["North America"]


def test_rog_questions_jsonl_clean(tmp_path):
    path = tmp_path / "clean.jsonl.gz"
    text = "\n".join(json.dumps(row) for row in rog_rows()) + "\n"
    write(path, text, compress=True)
    questions = read_rog_questions(path)
    assert [q.topic_entities for q in questions] == [["Justin Bieber"], ["Jaxon Bieber"], ["Canada"]]
    assert len(split(read_rog(path))[0]) == 5


# ---------------------------------------------------------------------------- detection

def test_detect_format(tmp_path):
    assert detect_format(DATA / "sample.nt") == "ntriples"
    assert detect_format(DATA / "freebase-rdf-sample") == "freebase"
    assert detect_format(DATA / "rog-sample.jsonl") == "rog"
    assert detect_format(DATA / "metaqa-kb-sample.txt") == "metaqa"
    assert detect_format(DATA / "triples-sample.tsv") == "tsv"
    assert detect_format(DATA / "entity2text-sample.txt") == "entity-names"
    nt = write(tmp_path / "dump.gz", (DATA / "sample.nt").read_text(), compress=True)
    assert detect_format(nt) == "ntriples"
    fb = write(tmp_path / "data.txt", (DATA / "freebase-rdf-sample").read_text())
    assert detect_format(fb) == "freebase"
    kb = write(tmp_path / "kb.txt.gz", "# comment\nA|r|B\n", compress=True)
    assert detect_format(kb) == "metaqa"
    assert detect_format(write(tmp_path / "names", "x\ty\n")) == "entity-names"
    with pytest.raises(InvalidInputError, match="ntriples") as e:
        detect_format(write(tmp_path / "odd.txt", "what is this\n"))
    assert all(name in str(e.value) for name in FORMATS)
    with pytest.raises(InvalidInputError, match="empty"):
        detect_format(write(tmp_path / "empty.txt", ""))


def test_read_triples_dispatch():
    assert list(read_triples(DATA / "sample.nt")) == SAMPLE_NT
    with Source(DATA / "metaqa-kb-sample.txt") as src:
        assert len(split(read_triples(src, "metaqa"))[0]) == 5
    with pytest.raises(InvalidInputError, match="unknown format 'csv'"):
        read_triples(DATA / "sample.nt", "csv")


# ---------------------------------------------------------------------------- MetaQA paths

def test_metaqa_relation_path_examples():
    assert metaqa_relation_path("actor_to_movie_to_director") == [("starred_actors", "in"), ("directed_by", "out")]
    assert metaqa_relation_path("movie_to_year") == [("release_year", "out")]
    assert metaqa_relation_path("tag_to_movie") == [("has_tags", "in")]
    assert metaqa_relation_path("movie_to_tags") == [("has_tags", "out")]
    assert metaqa_relation_path("movie_to_imdbrating") == [("has_imdb_rating", "out")]
    assert metaqa_relation_path("movie_to_imdbvotes") == [("has_imdb_votes", "out")]
    assert metaqa_relation_path("movie_to_writer_to_movie_to_language") == [
        ("written_by", "out"),
        ("written_by", "in"),
        ("in_language", "out"),
    ]
    for bad in ("actor_to_director", "movie", "movie_to_budget", ""):
        with pytest.raises(InvalidInputError):
            metaqa_relation_path(bad)


def test_metaqa_questions_fixture(tmp_path):
    hop = tmp_path / "2-hop"
    hop.mkdir()
    write(hop / "qa_dev.txt", "who directed films starring [Ann Blyth]\tMichael Curtiz|Charles Vidor\n")
    write(hop / "qa_dev_qtype.txt", "actor_to_movie_to_director\n")
    (q,) = read_metaqa_questions(hop / "qa_dev.txt")
    assert q == Question(
        id="2-hop/qa_dev:1",
        question="who directed films starring [Ann Blyth]",
        answers=["Michael Curtiz", "Charles Vidor"],
        topic_entities=["Ann Blyth"],
        answer_entities=["Michael Curtiz", "Charles Vidor"],
        hops=2,
        qtype="actor_to_movie_to_director",
    )
    write(hop / "qa_dev_qtype.txt", "actor_to_movie_to_director\nmovie_to_year\n")
    with pytest.raises(ParseError, match="must align"):
        read_metaqa_questions(hop / "qa_dev.txt")
    write(hop / "qa_test.txt", "no brackets here\tX\n")
    with pytest.raises(ParseError, match=r"qa_test.txt:1"):
        read_metaqa_questions(hop / "qa_test.txt")


def test_pathquestion_fixture(tmp_path):
    path = write(
        tmp_path / "PQ-2H.txt",
        "what is x 's wife 's job ?\tpolitician(politician/lawyer/)\tx#spouse#y#profession#politician#<end>#politician\n",
    )
    (q,) = read_pathquestion(path)
    assert q == Question(
        id="PQ-2H:1",
        question="what is x 's wife 's job ?",
        answers=["politician", "lawyer"],
        topic_entities=["x"],
        answer_entities=["politician", "lawyer"],
        hops=2,
        path=["spouse", "profession"],
        path_entities=["x", "y", "politician"],
    )
    bad = write(tmp_path / "bad.txt", "q\tanswer\tx#r#y#<end>#y\n")
    with pytest.raises(ParseError, match="bad.txt:1"):
        read_pathquestion(bad)


def test_pathquestion_large_reads_beside_the_pq_shape(tmp_path):
    """PathQuestion-Large (PQL) ends its path at the answer, with no ``#<end>#answer`` tail, and
    starts its questions with a space; names may hold parentheses. One file with both shapes."""
    path = write(
        tmp_path / "PQL-2H.txt",
        " what is the genre of x 's film ?\tDrama_(film)(Comedy/Drama_(film)/)\tx#__film__director__film#y#__film__film__genre#Drama_(film)\n"
        "what is x 's wife 's job ?\tpolitician(politician/lawyer/)\tx#spouse#y#profession#politician#<end>#politician\n",
    )
    large, classic = read_pathquestion(path)
    assert large == Question(
        id="PQL-2H:1",
        question="what is the genre of x 's film ?",
        answers=["Comedy", "Drama_(film)"],
        topic_entities=["x"],
        answer_entities=["Comedy", "Drama_(film)"],
        hops=2,
        path=["__film__director__film", "__film__film__genre"],
        path_entities=["x", "y", "Drama_(film)"],
    )
    assert gold_hops(large) == [("__film__director__film", True), ("__film__film__genre", True)]
    assert (classic.question, classic.answers, classic.path, classic.path_entities) == (
        "what is x 's wife 's job ?", ["politician", "lawyer"], ["spouse", "profession"], ["x", "y", "politician"]
    )
    assert load_dataset(path) == [large, classic]  # a PQL-*.txt file is read as PathQuestion
    for path_field in ["x#r", "x#r#y#s", "x#r#<end>#y#s", "x##y", "x#r#y#<end>#y#z"]:
        bad = write(tmp_path / "PQL-bad.txt", f"q ?\ty(y/)\t{path_field}\n")
        with pytest.raises(ParseError, match=r"PQL-bad.txt:1: path .* is neither"):
            read_pathquestion(bad)


# ---------------------------------------------------------------------------- the real files

@pytest.mark.shared_data
def test_real_metaqa_kb(shared_data):
    triples, rejects = split(read_metaqa(shared_data / "metaqa" / "kb.txt.gz"))
    assert rejects == []
    assert triples[0] == Triple("The Prowler", "starred_actors", "Evelyn Keyes")
    assert len(set(triples)) == 133_582
    assert len({t.relation for t in triples}) == 9


@pytest.mark.shared_data
def test_real_fb15k237(shared_data):
    folder = shared_data / "fb15k237"
    counts = {}
    for split_name in ("train", "valid", "test"):
        path = folder / f"{split_name}.txt.gz"
        assert detect_format(path) == "tsv"
        triples, rejects = split(read_tsv(path))
        assert rejects == []
        counts[split_name] = len(set(triples))
        if split_name == "train":
            assert triples[0] == Triple("m.027rn", "/location/country/form_of_government", "m.06cx9")
            assert len({t.relation for t in triples}) == 237
            assert all(t.subject.startswith(("m.", "g.")) and t.object.startswith(("m.", "g.")) for t in triples)
    assert counts == {"train": 272_115, "valid": 17_535, "test": 20_466}
    names, rejects = split(read_entity_names(folder / "entity2text.txt.gz"))
    assert rejects == []
    assert names[0] == Triple("m.06rf7", "type.object.name", Literal("Schleswig-Holstein", None, "en"))
    assert len(names) == 14_951


def kb_index(triples):
    out, into = defaultdict(set), defaultdict(set)
    for t in triples:
        out[t.subject, t.relation].add(t.object)
        into[t.object, t.relation].add(t.subject)
    return out, into


def walk(start, hops, out, into):
    front = {start}
    for relation, direction in hops:
        index = out if direction == "out" else into
        front = {n for node in front for n in index.get((node, relation), ())}
    return front


@pytest.mark.shared_data
def test_real_metaqa_paths_reach_the_gold_answers(shared_data):
    """Walking each dev question's relation path in the KB reaches all its gold answers."""
    out, into = kb_index(split(read_metaqa(shared_data / "metaqa" / "kb.txt.gz"))[0])
    expected = {1: 9_992, 2: 14_872, 3: 14_274}
    for hops, count in expected.items():
        questions = read_metaqa_questions(shared_data / "metaqa" / f"{hops}-hop" / "qa_dev.txt")
        assert len(questions) == count
        assert all(q.hops == hops and q.qtype for q in questions)
        covered = sum(
            set(q.answers) <= walk(q.topic_entities[0], metaqa_relation_path(q.qtype), out, into) for q in questions
        )
        assert covered / count >= 0.999, (hops, covered, count)


@pytest.mark.shared_data
def test_real_pathquestion(shared_data):
    folder = shared_data / "pathquestion"
    for name, questions_count, kb_count in (("2H", 1_908, 1_211), ("3H", 5_198, 2_839)):
        kb, rejects = split(read_tsv(folder / f"{name}-kb.txt"))
        assert rejects == [] and len(kb) == kb_count
        out, _ = kb_index(kb)
        questions = read_pathquestion(folder / f"PQ-{name}.txt")
        assert len(questions) == questions_count
        hops = int(name[0])
        for q in questions:
            assert q.hops == hops and len(q.path) == hops
            # the gold answers are exactly the ends of the annotated relation path
            assert set(q.answers) == walk(q.topic_entities[0], [(r, "out") for r in q.path], out, {})
    first = read_pathquestion(folder / "PQ-2H.txt")[0]
    assert first.question == "which nationality is frederica_of_mecklenburg-strelitz 's couple ?"
    assert first.topic_entities == ["frederica_of_mecklenburg-strelitz"]
    assert first.path == ["spouse", "nationality"]
    assert first.answers == ["united_kingdom"]


def test_gold_hops_of_every_dataset_shape(tmp_path):
    metaqa = Question("m", "who directed [Titanic]", [], ["Titanic"], [], qtype="movie_to_director")
    pq = Question("p", "q", [], ["a"], [], path=["r1", "r2"], path_entities=["a", "b", "c"])
    rows = tmp_path / "slice.jsonl"  # the WebQSP slice names its shape in qtype and its directions per hop
    rows.write_text(json.dumps({"id": "w", "question": "who produced x?", "answer": ["y"], "q_entity": ["m.1"], "a_entity": ["m.2"],
                                "qtype": "1-hop", "path": ["/film/producer/film"], "path_forward": [False]}) + "\n")
    (webqsp,) = read_rog_questions(rows)
    assert gold_hops(metaqa) == [("directed_by", True)]
    assert gold_hops(pq) == [("r1", True), ("r2", True)]
    assert gold_hops(webqsp) == [("/film/producer/film", False)]
    assert gold_hops(Question("n", "q", [], ["a"], [])) is None


# ---------------------------------------------------------------------------- question files of the wrong shape

_ROG_ROW = {"id": "q1", "question": "who is x", "answer": ["y"], "q_entity": ["x"], "a_entity": ["y"]}


@pytest.mark.parametrize("change, says", [
    ({"answer": 5}, "'answer' must be a list (or one string), got 5"),
    ({"answer": {"y": 1}}, "'answer' must be a list (or one string), got {'y': 1}"),  # not its keys
    ({"answer": [None, "y"]}, "item 0 of the answers of question 'q2' is None: give a string"),  # not "None"
    ({"q_entity": 3}, "'q_entity' must be a list (or one string), got 3"),
    ({"q_entity": [["x"]]}, "item 0 of the topic_entities of question 'q2' is ['x']: give a string"),
    ({"id": 7.5}, "'id' must be a string or a whole number, got 7.5"),
    ({"id": [1]}, "'id' must be a string or a whole number, got [1]"),
    ({"hops": "2"}, "the hops of question 'q2' must be a whole number, got '2'"),
    ({"qtype": 3}, "the qtype of question 'q2' must be a string, got 3"),
    ({"path": ["r"], "path_forward": "true"}, "got the string 'true'"),  # not [True, True, True, True]
    ({"path": ["r"], "path_forward": ["false"]}, "item 0 of the path_forward of question 'q2' is 'false': give true or false"),
    ({"path": ["r", "s"], "path_forward": [True]}, "has 1 entries for 2 relations of its path"),
    ({"answer": ["\ud800"]}, "lone surrogate (U+D800)"),  # it could not be written to the predictions file
])
def test_a_rog_question_row_of_the_wrong_shape_is_refused_with_its_line(change, says, tmp_path):
    """A value of the wrong kind was read as its repr, letter by letter or key by key, or failed with
    a traceback (an int for a list), or only once a run had answered every question (hops as text)."""
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps(_ROG_ROW) + "\n" + json.dumps({**_ROG_ROW, "id": "q2", **change}) + "\n")
    with pytest.raises(ParseError) as e:
        read_rog_questions(path)
    assert str(e.value).startswith(f"{path}:2: ") and says in str(e.value)


def test_rog_question_rows_take_one_string_for_a_list_and_numbers_as_their_text(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps({"id": 7, "question": "when", "answer": [1990, 7.5], "q_entity": "x", "a_entity": None}) + "\n"
                    + json.dumps({"question": "who", "answer": "Paris", "q_entity": ["x"], "id": None}) + "\n")
    first, second = read_rog_questions(path)
    assert (first.id, first.answers, first.topic_entities, first.answer_entities) == ("7", ["1990", "7.5"], ["x"], [])
    assert (second.id, second.answers) == ("2", ["Paris"])  # no id: its line number


def test_a_question_id_that_comes_twice_is_refused_before_anything_is_answered(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({**_ROG_ROW, "question": f"wording {i}"}) + "\n" for i in range(2)))
    with pytest.raises(ParseError, match=rf"^{path}:2: question id 'q1' comes twice \(first on line 1\): give each question its own id"):
        read_rog_questions(path)


@pytest.mark.parametrize("question, says", [
    ("who acted in [A] and [B]", "2 [bracketed] entities (A, B) where a MetaQA question names one topic entity"),
    ("what ] is [x]", "a ']' at character 6 closes no '['"),
    ("what is [x", "a '[' is never closed"),
    ("what is x", "no [bracketed] topic entity"),
    ("what is []", "an empty [] where the topic entity goes"),
    ("what is [x]\tb", "found 3 tab-separated field(s)"),  # not the answer 'a\tb'
])
def test_a_metaqa_question_without_one_clear_topic_entity_is_refused_with_its_line(question, says, tmp_path):
    """The topic was the text between the first '[' and the first ']': the first of two entities,
    or a part of one that holds brackets itself."""
    path = write(tmp_path / "qa_dev.txt", f"what is [y]\tb\n{question}\ta\n")
    with pytest.raises(ParseError) as e:
        read_metaqa_questions(path)
    assert str(e.value).startswith(f"{path}:2: ") and says in str(e.value)


def test_a_metaqa_entity_may_hold_brackets_of_its_own(tmp_path):
    (q,) = read_metaqa_questions(write(tmp_path / "qa_dev.txt", "what genre is [[REC]]\tHorror\n"))
    assert q.topic_entities == ["[REC]"] and q.question == "what genre is [[REC]]"


def test_question_text_files_read_a_byte_order_mark_and_every_line_end(tmp_path):
    """A BOM was kept in the first question, and a file with lone-CR line ends was one question
    whose last answer held the rest of the file."""
    qa = tmp_path / "qa_dev.txt"
    qa.write_bytes("\ufeffwhat is [x]\ta|b\rwhat is [y]\tc\r\nwhat is [z]\td\n".encode())
    (tmp_path / "qa_dev_qtype.txt").write_bytes("\ufeffmovie_to_year\rmovie_to_year\r\nmovie_to_year\r".encode())
    questions = read_metaqa_questions(qa)
    assert [(q.question, q.topic_entities, q.answers, q.qtype) for q in questions] == [
        ("what is [x]", ["x"], ["a", "b"], "movie_to_year"),
        ("what is [y]", ["y"], ["c"], "movie_to_year"),
        ("what is [z]", ["z"], ["d"], "movie_to_year"),
    ]
    pq = tmp_path / "PQ-2H.txt"
    pq.write_bytes(("\ufeff" + "what is x 's job ?\tp(p/)\tx#profession#p#<end>#p\r" * 2).encode())
    assert [(q.question, q.answers) for q in read_pathquestion(pq)] == [("what is x 's job ?", ["p"])] * 2


def test_a_question_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "qa_dev.txt"
    path.write_bytes(b"what is [x]\ta\nwhat is [\xed\xb3\xbf]\tb\n")
    with pytest.raises(ParseError, match=rf"^{path}:2: not UTF-8 text \(invalid continuation byte at byte 10 of the line\)"):
        read_metaqa_questions(path)
