"""Raw queries and S-expressions nested too deep or too long for a store to read safely: refused
with the engine's error before any parser sees them, the same on every store, and the store
answers the next call. Without the bounds the embedded store's process dies (SIGSEGV), FalkorDB
stays busy for good, and the S-expression parser raises RecursionError."""
from __future__ import annotations

import subprocess

import pytest

from cypher import readonly as cypher_guard
from engine.cli.main import main
from engine.errors import InvalidInputError
from engine.graph import Triple
from engine.sexpr import SExprSyntaxError
from engine.sexpr.parser import MAX_DEPTH
from sparql import readonly as sparql_guard
from sparql.terms import Terms

SPARQL_KINDS = ["oxigraph", "virtuoso"]
DEEP = 5_000  # past the depth at which Oxigraph's parser overflows its stack


def _nested_sparql(depth: int) -> str:
    """A query whose braces nest ``depth`` deep (the WHERE clause's own included)."""
    return "SELECT ?s WHERE { " + "{ " * (depth - 1) + "?s ?p ?o " + "} " * (depth - 1) + "}"


def _nested_cypher(depth: int) -> str:
    return "RETURN " + "(" * depth + "1" + ")" * depth + " AS x"


def _check_sparql(text: str) -> str:
    return sparql_guard.prepare_query(text, {}, Terms("http://rdf.freebase.com/ns/").parameter)


# ----------------------------------------------------------------------------- every store
def test_a_raw_query_nested_past_the_bound_is_refused_and_the_store_answers_on(store):
    backend = store([Triple("a", "r", "b")])
    if backend.dialect == "sparql":
        nested, bound, answer = _nested_sparql, sparql_guard.MAX_NESTING, [["a"]]
        plain = "SELECT ?s WHERE { ?s ?p ?o }"
    else:
        nested, bound, answer = _nested_cypher, cypher_guard.MAX_NESTING, [[1]]
        plain = "MATCH (n {id: 'a'}) RETURN n.id AS s"
    assert backend.query(nested(bound)).rows == answer
    for depth in (bound + 1, DEEP):
        with pytest.raises(InvalidInputError, match=f"nest more than {bound} deep"):
            backend.query(nested(depth))
    assert backend.query(plain).rows == [["a"]]


def test_an_sexpression_nested_past_the_bound_is_a_syntax_error(store):
    backend = store([Triple("m.0a", "r.r", "m.0a")])

    def join(depth: int) -> str:
        return "(JOIN r.r " * depth + "m.0a" + ")" * depth

    assert backend.execute(join(MAX_DEPTH)).answers == ["m.0a"]
    for depth in (MAX_DEPTH + 1, 2_000):
        with pytest.raises(SExprSyntaxError, match=f"more than {MAX_DEPTH} levels") as caught:
            backend.execute(join(depth))
        assert caught.value.position == len("(JOIN r.r ") * MAX_DEPTH  # the first '(' too many
    assert backend.execute(join(3)).answers == ["m.0a"]


# ----------------------------------------------------------------------------- SPARQL
@pytest.mark.parametrize("kind", SPARQL_KINDS)
def test_every_kind_of_sparql_bracket_counts(make_store, kind):
    backend = make_store(kind, [Triple("a", "r", "b")])
    deep = [
        "SELECT * WHERE { " + "{" * DEEP + " ?s ?p ?o " + "}" * DEEP + " }",
        "SELECT * WHERE { ?s ?p ?o FILTER(" + "(" * 10_000 + "1" + ")" * 10_000 + ") }",
        "SELECT * WHERE { ?s ?p " + "[ ?p " * DEEP + "?o" + " ]" * DEEP + " }",
        "SELECT * WHERE { ?s ?p ?o " + "OPTIONAL { ?s ?p ?o " * 3_000 + "}" * 3_000 + " }",
        "SELECT * WHERE { " + "{ SELECT * WHERE " * 3_000 + "{ ?s ?p ?o }" + " }" * 3_000 + " }",
        "SELECT * WHERE { " + "{" * DEEP,  # never closed
        "SELECT * WHERE { " + "}" * 100 + "{" * DEEP,  # closing brackets that open nothing hide nothing
    ]
    for text in deep:
        with pytest.raises(InvalidInputError, match="brackets nest more than 64 deep"):
            backend.query(text)
    assert backend.query("SELECT ?s WHERE { ?s ?p ?o }").rows == [["a"]]


@pytest.mark.parametrize("kind", SPARQL_KINDS)
def test_long_chains_of_clauses_and_operators_are_refused(make_store, kind):
    backend = make_store(kind, [Triple("a", "r", "b")])
    long = [
        "SELECT * WHERE { ?s ?p ?o " + "MINUS { ?s ?p ?o } " * 3_000 + "}",  # Oxigraph dies at about 2,600
        "SELECT * WHERE { ?s ?p ?o FILTER(" + "!" * 10_000 + "true) }",
        "SELECT * WHERE { ?s ?p ?o FILTER(" + " || ".join(["true"] * 10_000) + ") }",
        "SELECT * WHERE { " + " ".join(f"BIND(1 AS ?x{i})" for i in range(3_000)) + " }",
        # a VALUES header that never opens its data block does not make the rest data
        "SELECT * WHERE { VALUES ?x ?s ?p ?o " + "MINUS { ?s ?p ?o } " * 3_000 + "}",
    ]
    for text in long:
        with pytest.raises(InvalidInputError, match="more than 2,000 operators, keywords and brackets"):
            backend.query(text)
    assert backend.query("SELECT ?s WHERE { ?s ?p ?o }").rows == [["a"]]


@pytest.mark.parametrize("kind", SPARQL_KINDS)
def test_queries_within_the_bounds_run(make_store, kind):
    backend = make_store(kind, [Triple("a", "r", "b")])
    # 5 operators (SELECT WHERE { } LIMIT) and 3 per FILTER(true): exactly the bound
    filters = (sparql_guard.MAX_OPERATORS - 5) // 3
    at_bound = "SELECT ?s WHERE { ?s ?p ?o " + "FILTER(true) " * filters + "} LIMIT 1"
    assert backend.query(at_bound).rows == [["a"]]
    with pytest.raises(InvalidInputError, match="operators"):
        backend.query(at_bound.replace("?o ", "?o FILTER(true) ", 1))
    # values are terms, not operators: long VALUES rows and IN lists stay allowed
    rows = " ".join(f"({i} {i + 1})" for i in range(3_000))
    result = backend.query(f"SELECT ?a ?b WHERE {{ VALUES (?a ?b) {{ {rows} }} }} ORDER BY ?a")
    assert len(result.rows) == 3_000 and [v.value for v in result.rows[-1]] == ["2999", "3000"]
    listed = ", ".join(map(str, range(1_000)))  # Virtuoso takes no more (the guard would)
    assert backend.query(f"SELECT ?x WHERE {{ BIND(999 AS ?x) FILTER(?x IN ({listed})) }}").rows[0][0].value == "999"
    long_list = ", ".join(map(str, range(5_000)))
    _check_sparql(f"SELECT ?x WHERE {{ BIND(1 AS ?x) FILTER(?x IN ({long_list})) }}")


def test_the_token_bound():
    head, tail = "SELECT * WHERE { VALUES ?x { ", " } }"  # 8 tokens around the values
    values = sparql_guard.MAX_TOKENS - 8
    at_bound = head + "1 " * values + tail
    assert _check_sparql(at_bound) == at_bound
    with pytest.raises(InvalidInputError, match="more than 100,000 tokens"):
        _check_sparql(head + "1 " * (values + 1) + tail)


def test_kgqa_query_with_a_deep_query_fails_with_the_engines_error(tmp_path, capsys, kgqa_script):
    store = str(tmp_path / "demo")
    assert main(["demo", "--store", store]) == 0
    capsys.readouterr()
    text = "SELECT * WHERE { " + "{" * DEEP + " ?s ?p ?o " + "}" * DEEP + " }"
    run = subprocess.run([str(kgqa_script), "query", "query", text, "--store", store], capture_output=True, text=True)
    assert run.returncode == 2, (run.returncode, run.stderr[-500:])  # SIGSEGV was -11 (a shell's 139)
    assert "brackets nest more than 64 deep" in run.stderr and run.stdout == ""


# ----------------------------------------------------------------------------- Cypher
CYPHER_NESTINGS = {
    # name: a query nested `depth` deep in the guard's count
    "parentheses": lambda depth: "RETURN " + "(" * depth + "1" + ")" * depth + " AS x",
    "lists": lambda depth: "RETURN " + "[" * depth + "1" + "]" * depth + " AS x",
    "maps": lambda depth: "RETURN " + "{a: " * depth + "1" + "}" * depth + " AS x",
    "keys named end": lambda depth: "RETURN " + "{end: " * depth + "1" + "}" * depth + " AS x",
    "functions": lambda depth: "RETURN " + "abs(" * depth + "1" + ")" * depth + " AS x",
    "CASE": lambda depth: "RETURN " + "CASE WHEN true THEN " * depth + "1" + " END" * depth + " AS x",
    "NOT": lambda depth: "RETURN " + "NOT " * depth + "true AS x",
    "signs": lambda depth: "RETURN " + "- " * depth + "1 AS x",
    "list comprehensions": lambda depth: "RETURN " + "[x IN " * (depth - 1) + "[1]" + " | x]" * (depth - 1) + " AS x",
    "NOT over brackets": lambda depth: (
        "RETURN " + "NOT (" * (depth // 2) + "NOT " * (depth % 2) + "true" + ")" * (depth // 2) + " AS x"
    ),
}


def test_cypher_nesting_of_every_kind_counts(make_store):
    backend = make_store("bolt", [Triple("a", "r", "b")])
    bound = cypher_guard.MAX_NESTING
    for name, nested in CYPHER_NESTINGS.items():
        assert len(backend.query(nested(bound)).rows) == 1, name  # read at once at the bound
        for depth in (bound + 1, bound + 2, 40):  # 40: FalkorDB would be busy for good
            with pytest.raises(InvalidInputError, match=f"nest more than {bound} deep"):
                backend.query(nested(depth))
    # a sign's operand ends at the next binary operator; NOT's at AND
    flat = "RETURN " + " + ".join(["-1"] * 50) + " AS x, " + " AND ".join(["NOT false"] * 50) + " AS y"
    assert backend.query(flat).rows == [[-50, True]]
    assert backend.query("MATCH (n {id: 'a'}) RETURN n.id AS s").rows == [["a"]]


def test_cypher_outside_ascii_outside_quotes_is_refused_and_the_connection_stays_usable(make_store):
    backend = make_store("bolt", [Triple("a", "r", "b")])
    for text in [
        "RETURN 1 AS é",
        "RETURN 1 AS x€",
        "RETURN\u00a01 AS x",  # a no-break space is no blank to FalkorDB
        "MATCH (n日本) RETURN 1 AS x",
        "RETURN 'é AS x",  # a string never closed
        "RETURN 1 AS x /* é",  # a comment never closed
    ]:
        with pytest.raises(InvalidInputError, match="outside a string, a comment or a `backticked` name") as caught:
            backend.query(text)
        assert "U+" in str(caught.value)
        assert backend.query("MATCH (n {id: 'a'}) RETURN n.id AS s").rows == [["a"]]
    # in strings, comments and backticked names any character passes
    result = backend.query("RETURN 'é€日本' AS `é` // é")
    assert result.columns == ["é"] and result.rows == [["é€日本"]]
