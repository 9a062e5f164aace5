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
from engine.graph import FREEBASE_NS, XSD, Literal, Triple
from engine.sexpr import SExprSyntaxError
from engine.reference import ReferenceStore
from engine.sexpr import parse
from engine.sexpr.parser import MAX_ANDS, MAX_DEPTH, MAX_EXTREMES, MAX_PATTERNS
from engine.sexpr.tree import And, Entity, Join, Relation, triple_patterns
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


def _balanced(items: list[str]) -> str:
    """``items`` joined by ANDs into a balanced tree (``len(items) - 1`` of them)."""
    while len(items) > 1:
        items = [f"(AND {items[i]} {items[i + 1]})" if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)]
    return items[0]


def _chain(n: int, form: str = "(JOIN r.r {})", base: str = "m.0a") -> str:
    for _ in range(n):
        base = form.format(base)
    return base


#: expressions at the size bounds, the widest of each shape, on a graph of one self-loop and one type
SEXPR_GRAPH = [Triple("m.0a", "r.r", "m.0a"), Triple("m.0a", "type.object.type", "c.c"), Triple("m.0a", "n.n", Literal.make("5", XSD + "integer"))]
SEXPR_AT_BOUNDS = {
    "a star of class constraints": _balanced(["c.c"] * (MAX_ANDS + 1)),
    "a star of chains": _balanced([_chain(3)] * MAX_ANDS + ["c.c"]),
    "a chain as long as the patterns and nesting allow": _chain(MAX_PATTERNS),
    "nested ARGMAX over a star": f"(ARGMIN (ARGMAX {_balanced([_chain(2)] * 6)} n.n) (JOIN r.r n.n))",
    "time constraints": _chain(MAX_PATTERNS // 4, "(TC {} r.r 2009)"),
    "comparisons": _balanced(["(le n.n 5^^http://www.w3.org/2001/XMLSchema#integer)"] * (MAX_ANDS + 1)),
    "a count": f"(COUNT {_balanced([_chain(3, '(JOIN (R r.r) {})')] * MAX_ANDS)})",
    "entities": _balanced(["m.0a"] * (MAX_ANDS + 1)),
}


def test_sexpressions_at_the_size_bounds_answer_as_the_reference_on_every_store(store):
    backend, reference = store(SEXPR_GRAPH), ReferenceStore(SEXPR_GRAPH)
    assert max(triple_patterns(parse(text)) for text in SEXPR_AT_BOUNDS.values()) == MAX_PATTERNS
    for name, text in SEXPR_AT_BOUNDS.items():
        assert backend.execute(text) == reference.execute(text), name
    assert backend.execute(SEXPR_AT_BOUNDS["a chain as long as the patterns and nesting allow"]).answers == ["m.0a"]


@pytest.mark.parametrize("text, what, token", [
    # each bound passed by one, pointed at the first token past it: the nesting, the ANDs, the
    # ARGMAX forms; and the triple patterns, pointed at the start (two chains: one alone would
    # nest too deep first; time constraints count four, an ARGMAX its argument twice)
    (_chain(MAX_DEPTH + 1), f"more than {MAX_DEPTH} levels", (MAX_DEPTH, "(")),
    (_balanced(["m.0a"] * (MAX_ANDS + 2)), f"more than {MAX_ANDS} ANDs", (MAX_ANDS, "AND")),
    (_chain(MAX_EXTREMES + 1, "(ARGMAX {} n.n)"), f"more than {MAX_EXTREMES} ARGMAX or ARGMIN", (MAX_EXTREMES, "ARGMAX")),
    (f"(AND {_chain(MAX_PATTERNS // 2)} {_chain(MAX_PATTERNS // 2 + 1)})", f"join {MAX_PATTERNS + 1} triple patterns", None),
    (f"(AND {_chain(MAX_PATTERNS // 4)} {_chain(MAX_PATTERNS // 4, '(TC {} r.r 2009)')})", "join 80 triple patterns", None),
    (f"(ARGMAX {_chain(MAX_PATTERNS // 2)} n.n)", f"join {2 * (MAX_PATTERNS // 2 + 1)} triple patterns", None),
    # what took a store down: 14 nested ARGMAX compiled to 100 MB of SPARQL; a star of 17 chains
    # 6 long stopped Virtuoso's server; a star of 4,096 joins stopped Oxigraph's process
    (_chain(14, "(ARGMAX {} r.r)"), f"more than {MAX_EXTREMES} ARGMAX or ARGMIN", (MAX_EXTREMES, "ARGMAX")),
    (_balanced([_chain(6)] * 17), "join 102 triple patterns", None),
    (_balanced(["(JOIN (R r.r) m.0a)"] * 4_096), f"more than {MAX_ANDS} ANDs", (MAX_ANDS, "AND")),
], ids=["nesting", "ANDs", "ARGMAX", "patterns", "time constraints", "ARGMAX twice", "nested ARGMAX", "star of chains",
        "star of 4096"])
def test_an_sexpression_past_a_size_bound_is_a_syntax_error(store, text, what, token):
    backend = store(SEXPR_GRAPH)
    with pytest.raises(SExprSyntaxError, match=what) as caught:
        backend.execute(text)
    if token is None:
        assert caught.value.position == 0
    else:  # the position of the token after the first `skip` of its kind
        skip, word = token
        position = -1
        for _ in range(skip + 1):
            position = text.index(word, position + 1)
        assert caught.value.position == position
    assert backend.execute("(JOIN r.r m.0a)").answers == ["m.0a"]


def test_a_tree_built_in_python_is_held_to_the_same_bounds(make_store):
    backend = make_store("oxigraph", SEXPR_GRAPH)
    chain = Entity("m.0a")
    for _ in range(MAX_PATTERNS // 2 + 1):
        chain = Join(Relation("r.r"), chain)
    with pytest.raises(SExprSyntaxError, match=f"join {MAX_PATTERNS + 2} triple patterns"):
        backend.execute(And(chain, chain))
    assert backend.execute(chain).answers == ["m.0a"]


# ----------------------------------------------------------------------------- SPARQL
@pytest.mark.parametrize("kind", SPARQL_KINDS)
def test_every_kind_of_sparql_bracket_counts(make_store, kind):
    backend = make_store(kind, [Triple("a", "r", "b")])
    deep = [
        "SELECT * WHERE { " + "{" * DEEP + " ?s ?p ?o " + "}" * DEEP + " }",
        "SELECT * WHERE { ?s ?p ?o FILTER(" + "(" * 10_000 + "1" + ")" * 10_000 + ") }",
        "SELECT * WHERE { ?s ?p ?o " + "OPTIONAL { ?s ?p ?o " * 3_000 + "}" * 3_000 + " }",
        "SELECT * WHERE { " + "{ SELECT * WHERE " * 3_000 + "{ ?s ?p ?o }" + " }" * 3_000 + " }",
        "SELECT * WHERE { " + "{" * DEEP,  # never closed
        "SELECT * WHERE { " + "}" * 100 + "{" * DEEP,  # closing brackets that open nothing hide nothing
    ]
    for text in deep:
        with pytest.raises(InvalidInputError, match="brackets nest more than 64 deep"):
            backend.query(text)
    # blank nodes nest with a pattern each, so the pattern bound comes first
    with pytest.raises(InvalidInputError, match="more than 64 triple patterns"):
        backend.query("SELECT * WHERE { ?s ?p " + "[ ?p " * DEEP + "?o" + " ]" * DEEP + " }")
    assert backend.query("SELECT ?s WHERE { ?s ?p ?o }").rows == [["a"]]


@pytest.mark.parametrize("kind", SPARQL_KINDS)
def test_long_chains_of_clauses_and_operators_are_refused(make_store, kind):
    backend = make_store(kind, [Triple("a", "r", "b")])
    long = [
        "SELECT * WHERE { ?s ?p ?o " + "MINUS { } " * 3_000 + "}",  # Oxigraph dies at about 2,600
        "SELECT * WHERE { ?s ?p ?o FILTER(" + "!" * 10_000 + "true) }",
        "SELECT * WHERE { ?s ?p ?o FILTER(" + " || ".join(["true"] * 10_000) + ") }",
        "SELECT * WHERE { " + " ".join(f"BIND(1 AS ?x{i})" for i in range(3_000)) + " }",
        # a VALUES header that never opens its data block does not make the rest data
        "SELECT * WHERE { VALUES ?x ?s ?p ?o " + "MINUS { } " * 3_000 + "}",
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


def _patterns(n: int, one: str, more: str) -> str:
    """``n`` triple patterns written as ``one`` (``{i}`` numbered) side by side, each ``more``
    holding two, and a lone one when ``n`` is odd."""
    pairs = " ".join(more.format(i=i) for i in range(n // 2))
    return pairs + (" " + one.format(i=n) if n % 2 else "")


#: each way of writing ``n`` triple patterns over the graph ``a r a`` (``ns:`` the stores' namespace)
PATTERN_SHAPES = {
    "a chain": lambda n: " ".join(f"?x{i} ns:r ?x{i + 1} ." for i in range(n)),
    "a star": lambda n: " ".join(f"?x0 ns:r ?y{i} ." for i in range(n)),
    "groups": lambda n: " ".join(f"{{ ?x{i} ns:r ?x{i + 1} }}" for i in range(n)),
    "OPTIONALs": lambda n: "?x0 ns:r ?x1 . " + " ".join(f"OPTIONAL {{ ?x{i} ns:r ?x{i + 1} }}" for i in range(1, n)),
    "an object list": lambda n: "?x0 ns:r " + ", ".join(f"?y{i}" for i in range(n)),
    "a predicate list": lambda n: "?x0 " + "; ".join(f"ns:r ?y{i}" for i in range(n)),
    "blank nodes": lambda n: _patterns(n, "?x0 ns:r ?y{i} .", "?x0 ns:r [ ns:r ?y{i} ] ."),
    "blank node subjects": lambda n: _patterns(n, "?x0 ns:r ?y{i} .", "[ ns:r ?x0 ] ns:r ?y{i} ."),
    # a collection's node and two per member (rdf:first, rdf:rest)
    "a collection": lambda n: "?x0 ns:r ?y0 . " * (1 - n % 2) + "?x0 ?p (" + " ?v" * ((n - 1) // 2) + " )",
}


def _patterns_query(shape: str, n: int) -> str:
    return f"PREFIX ns: <{FREEBASE_NS}> SELECT ?x0 WHERE {{ {PATTERN_SHAPES[shape](n)} }} LIMIT 1"


@pytest.mark.parametrize("shape", PATTERN_SHAPES)
def test_the_pattern_bound_counts_every_way_of_writing_patterns(shape):
    _check_sparql(_patterns_query(shape, sparql_guard.MAX_PATTERNS))
    with pytest.raises(InvalidInputError, match=f"more than {sparql_guard.MAX_PATTERNS} triple patterns"):
        _check_sparql(_patterns_query(shape, sparql_guard.MAX_PATTERNS + 1))


@pytest.mark.parametrize("kind", SPARQL_KINDS)
def test_a_raw_query_past_the_pattern_bound_is_refused_and_one_at_it_runs(make_store, kind):
    backend = make_store(kind, [Triple("a", "r", "a")])
    # the shapes Virtuoso's server died of, at the bound (each of the others takes it 1 to 10 s there)
    for shape in ("a chain", "groups", "OPTIONALs"):
        assert backend.query(_patterns_query(shape, sparql_guard.MAX_PATTERNS)).rows == [["a"]], shape
        with pytest.raises(InvalidInputError, match=f"more than {sparql_guard.MAX_PATTERNS} triple patterns"):
            backend.query(_patterns_query(shape, sparql_guard.MAX_PATTERNS + 1))
    # what stopped Virtuoso's server: a chain of 100 patterns (of 90, 2 chains of 40, 100 groups, 100 OPTIONALs)
    with pytest.raises(InvalidInputError, match="triple patterns"):
        backend.query(_patterns_query("a chain", 100))
    assert backend.query("SELECT ?s WHERE { ?s ?p ?o }").rows == [["a"]]


def test_filters_projections_values_and_lists_are_no_triple_patterns():
    # expressions, VALUES data and IN lists hold no pattern: within the bound however long
    many = 5 * sparql_guard.MAX_PATTERNS  # 320 FILTERs, 4 operators each
    _check_sparql("SELECT * WHERE { ?s ?p ?o " + " ".join(f"FILTER(?o != {i})" for i in range(many)) + " }")
    _check_sparql("SELECT * WHERE { VALUES ?s { " + " ".join(f"<x:{i}>" for i in range(many)) + " } ?s ?p ?o }")
    _check_sparql("SELECT * WHERE { ?s ?p ?o FILTER(?o IN (" + ", ".join(map(str, range(many))) + ")) }")
    _check_sparql("SELECT " + " ".join(f"(CONCAT(?s, ?o) AS ?c{i})" for i in range(100)) + " WHERE { ?s ?p ?o }")


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
