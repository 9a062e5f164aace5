"""The question explorer: every method's record as one graph (:mod:`engine.serve.trace_graph`),
the endpoints the page reads, and the page itself in Debian's headless chromium, driven by
chromedriver: it answers a question and draws the graph, whose nodes the test reads back through
cytoscape's own API. ``make explorer-screenshot`` redraws docs/images/explorer.png."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.graph import NAME_RELATION, Literal, Triple
from engine.graph import Path as GraphPath
from engine.methods import registry
from engine.methods.spec import Method, MethodSpec, Models, Prediction, option
from engine.render import render_path, term_text
from engine.serve import trace_graph
from engine.serve.client import ServeClient
from engine.serve.explorer import MAX_RECORD_ITEMS, PAGE_HEADERS
from engine.serve.settings import ServeSettings
from engine.servers.base import free_port
from engine.store import SCHEMA_RELATIONS, Store
from loaders.questions import Question
from tests.cli_process import ROOT, child_env
from tests.conftest import missing
from tests.test_serve import GRAPH, served

GOLDEN = ROOT / "tests" / "golden" / "methods"
SCREENSHOT_ENV = "KGQA_EXPLORER_SCREENSHOT"

#: questions on the demo's sample graph, as a RoG-style file (`kgqa serve --questions`)
QUESTIONS = [
    {"id": "director", "question": "who directed [Blade Runner]", "answer": ["Ridley Scott"], "q_entity": ["m.0kq01"],
     "a_entity": ["m.0kq10"], "path": ["film.film.directed_by"], "path_forward": [True]},
    {"id": "same-director", "question": "which other film did the director of [Blade Runner] direct", "answer": ["Alien"],
     "q_entity": ["m.0kq01"], "a_entity": ["m.0kq02"], "path": ["film.film.directed_by", "film.film.directed_by"],
     "path_forward": [True, False]},
    {"id": "genre", "question": "what genre is [Alien]", "answer": ["Science Fiction", "Horror"], "q_entity": ["m.0kq02"],
     "a_entity": ["m.0kq40", "m.0kq41"], "path": ["film.film.genre"], "path_forward": [True]},
]


@pytest.fixture(scope="module")
def questions_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("explorer") / "sample-questions.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- the graph of a record
def _by_label(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["label"]: n for n in view["nodes"]}


def _edges(view: dict[str, Any], role: str) -> set[tuple[str, str, str]]:
    label = {n["id"]: n["label"] for n in view["nodes"]}
    return {(label[e["source"]], e["relation"], label[e["target"]]) for e in view["edges"] if role in e["roles"]}


@pytest.mark.parametrize("method", ["rog", "ldr", "etd", "fidelis", "arg"])
def test_every_methods_own_records_are_drawn(method):
    records = json.loads((GOLDEN / f"{method}.json").read_text(encoding="utf-8"))
    views = [trace_graph.view(method, record, {}) for record in records]
    for record, view in zip(records, views):
        ids = {n["id"] for n in view["nodes"]}
        assert all(e["source"] in ids and e["target"] in ids for e in view["edges"])
        nodes = _by_label(view)
        assert all("topic" in nodes[t]["roles"] for t in record["topic"])
        assert all("gold" in nodes[a]["roles"] for a in record["answers"])
        answers = {label for label, n in nodes.items() if "answer" in n["roles"]}
        assert all(p in answers or any(a.casefold() in p.casefold() for a in answers) for p in record["prediction"])
        assert _edges(view, "chosen") <= _edges(view, "explored")
    assert any(_edges(v, "explored") for v in views) and any(_edges(v, "chosen") for v in views)


def test_rendered_paths_point_the_stored_way_and_end_where_the_walk_ends():
    walk = trace_graph.rendered_walk("Blade Runner → film.film.directed_by → Ridley Scott ← film.film.directed_by ← Alien")
    assert [(h.src.text, h.relation, h.dst.text, h.forward) for h in walk] == [
        ("Blade Runner", "film.film.directed_by", "Ridley Scott", True),
        ("Alien", "film.film.directed_by", "Ridley Scott", False),
    ]
    record = {"topic": ["m.0kq01"], "answers": ["Alien"], "answer_ids": [], "prediction": ["Alien", "Star Wars"],
              "trace": {"paths": ["Blade Runner → film.film.directed_by → Ridley Scott ← film.film.directed_by ← Alien",
                                  "Blade Runner → film.film.genre → Science Fiction ← film.film.genre ← Star Wars",
                                  "Blade Runner → film.film.genre → Science Fiction ← film.film.genre ← Alien"]}}
    view = trace_graph.view("rog", record, {"m.0kq01": "Blade Runner"})
    nodes = _by_label(view)
    assert nodes["Blade Runner"]["roles"] == ["topic"]  # the topic's id and its name in the paths: one node
    assert nodes["Alien"]["roles"] == ["answer", "gold"] and nodes["Star Wars"]["roles"] == ["answer"]
    assert _edges(view, "chosen") == {  # the walks to the first answer
        ("Blade Runner", "film.film.directed_by", "Ridley Scott"), ("Alien", "film.film.directed_by", "Ridley Scott"),
        ("Blade Runner", "film.film.genre", "Science Fiction"), ("Alien", "film.film.genre", "Science Fiction"),
    }
    assert ("Star Wars", "film.film.genre", "Science Fiction") in _edges(view, "explored") - _edges(view, "chosen")


def test_a_logical_form_is_drawn_as_its_query_graph():
    record = {"topic": ["m.0kq01"], "answers": ["Ridley Scott"], "answer_ids": ["m.0kq10"], "prediction": ["Ridley Scott"],
              "prediction_ids": ["m.0kq10"],
              "trace": {"references": ["(JOIN (R film.film.genre) m.0kq01)"],
                        "executed": ["(JOIN (R film.film.directed_by) m.0kq01)", "(COUNT (JOIN film.film.directed_by m.0kq10))",
                                     "(AND film.director (JOIN (R film.film.directed_by) (JOIN film.film.genre m.0kq40)))",
                                     "(ARGMAX (JOIN (R film.film.directed_by) m.0kq01) film.film.initial_release_date)",
                                     "(JOIN (R film.film.directed_by) (unbalanced"],
                        "sexpr": "(JOIN (R film.film.directed_by) m.0kq01)"}}
    names = {"m.0kq01": "Blade Runner", "m.0kq10": "Ridley Scott", "m.0kq40": "Science Fiction"}
    view = trace_graph.view("arg", record, names)
    assert _edges(view, "chosen") == {("Blade Runner", "film.film.directed_by", "?"), ("?", "answer", "Ridley Scott")}
    explored = _edges(view, "explored")
    assert {("Blade Runner", "film.film.genre", "?"), ("?", "film.film.directed_by", "Ridley Scott"),
            ("?", "type.object.type", "film.director"), ("?", "film.film.genre", "Science Fiction"),
            ("?", "ARGMAX", "ARGMAX")} <= explored
    variables = [n for n in view["nodes"] if "variable" in n["roles"]]
    assert variables and all(n["label"] == "?" for n in variables)
    assert _by_label(view)["Ridley Scott"]["roles"] == ["answer", "gold"]


def test_ldr_chooses_a_shortest_walk_in_its_subgraph_to_each_answer():
    record = {"topic": ["m.0kq10"], "answers": ["Alien"], "answer_ids": ["m.0kq02"], "prediction": ["Alien", "Blade Runner"],
              "prediction_ids": ["m.0kq02", "m.0kq01"],
              "trace": {"g_k": [["m.0kq01", "film.film.directed_by", "m.0kq10"], ["m.0kq02", "film.film.directed_by", "m.0kq10"],
                                ["m.0kq01", "film.film.genre", "m.0kq40"], ["m.0kq02", "film.film.genre", "m.0kq40"]]}}
    view = trace_graph.view("ldr", record, {"m.0kq01": "Blade Runner", "m.0kq02": "Alien", "m.0kq10": "Ridley Scott"})
    assert _edges(view, "chosen") == {("Blade Runner", "film.film.directed_by", "Ridley Scott"),
                                      ("Alien", "film.film.directed_by", "Ridley Scott")}
    assert len(_edges(view, "explored")) == 4 and _by_label(view)["m.0kq40"]["roles"] == []


def test_gold_walks_keep_the_datasets_directions_and_end_at_gold():
    paths = [{"nodes": ["m.0kq01", "m.0kq10", x], "relations": ["film.film.directed_by"] * 2, "forward": [True, False]}
             for x in ("m.0kq01", "m.0kq02")]
    walks = trace_graph.gold_walks(paths, [True, False], {"m.0kq02"}, set(), {})
    assert [[(h.src.text, h.dst.text) for h in w] for w in walks] == [[("m.0kq01", "m.0kq10"), ("m.0kq02", "m.0kq10")]]
    assert trace_graph.gold_walks(paths, [True, True], {"m.0kq02"}, set(), {}) == []
    assert len(trace_graph.gold_walks(paths, None, {"m.nowhere"}, set(), {})) == 2  # none ends at gold: all


def test_a_large_trace_is_cut():
    record = {"topic": ["hub"], "answers": [], "prediction": [],
              "trace": {"paths": [f"hub → r → n{i}" for i in range(trace_graph.MAX_EDGES + 50)]}}
    view = trace_graph.view("rog", record, {})
    assert view["truncated"] and len(view["edges"]) == trace_graph.MAX_EDGES


# ----------------------------------------------------------------------------- a method that needs no model
@dataclass(frozen=True)
class WalkConfig:
    batch_size: int = option(4, "questions answered together")


class Walker(Method):
    """Follows every edge of the topic entities and answers with the ends of those whose
    relation the question names (``directed`` for ``film.film.directed_by``), writing its paths
    as RoG does."""

    name = "walker"

    def __init__(self, store: Store, models: Models, config: WalkConfig) -> None:
        super().__init__(store, models, config.batch_size)

    def _answer(self, questions: list[Question]) -> list[Prediction]:
        topics = list(dict.fromkeys(t for q in questions for t in q.topic_entities))
        edges = [e for e in self.store.expand(topics).edges if e.relation not in SCHEMA_RELATIONS]
        names = self.store.names(list(dict.fromkeys(topics + [e.dst for e in edges if isinstance(e.dst, str)])))
        answered = []
        for q in questions:
            mine = [e for e in edges if e.src in q.topic_entities]
            words = set(re.findall(r"\w+", q.question.lower()))
            hits = [e.dst for e in mine if words & set(e.relation.rsplit(".", 1)[-1].split("_"))]
            paths = [render_path(GraphPath((e.src, e.dst), (e.relation,), (e.forward,)), names) for e in mine]
            answered.append(Prediction([term_text(h, names) for h in hits], [term_text(h) for h in hits], {"paths": paths}))
        return answered


@pytest.fixture
def walker() -> Iterator[MethodSpec]:
    spec = MethodSpec("walker", "answers with the ends of the topic's edges whose relation the question names", WalkConfig,
                      lambda config, store, models: Walker(store, models, config))
    registry.register(spec)
    yield spec
    registry.unregister("walker")


@pytest.fixture(scope="module")
def oxigraph() -> Iterator[Store]:
    from engine.stores.oxigraph import OxigraphStore

    with OxigraphStore(None) as opened:
        opened.add_triples(GRAPH)
        yield opened


# ----------------------------------------------------------------------------- the endpoints
def test_the_explorer_endpoints_list_questions_and_draw_an_answer(oxigraph, walker, questions_file):
    with served(oxigraph, ServeSettings(questions=str(questions_file))) as client:
        assert client.get("/v1/explorer/sources")["sources"][0] == "sample-questions.jsonl"
        listed = client.get("/v1/explorer/questions?source=sample-questions.jsonl&search=BLADE")
        assert (listed["total"], [q["id"] for q in listed["questions"]]) == (2, ["director", "same-director"])
        q = listed["questions"][1]
        assert (q["topics"], q["answer_ids"], q["path"], q["path_forward"]) == (
            ["m.0kq01"], ["m.0kq02"], ["film.film.directed_by"] * 2, [True, False])
        assert [q["id"] for q in client.get("/v1/explorer/questions?source=sample-questions.jsonl&offset=2")["questions"]] == ["genre"]

        first = listed["questions"][0]
        answer = client.answer(method="walker", questions=[
            {"question": first["question"], "topics": first["topics"], "answers": first["answers"], "answer_ids": first["answer_ids"]}])
        record = answer["predictions"][0]
        assert record["prediction"] == ["Ridley Scott"]
        view = client.request("POST", "/v1/explorer/graph",
                              {"method": "walker", "record": record, "path": first["path"], "path_forward": first["path_forward"]})[1]
        nodes = _by_label(view)
        assert nodes["Blade Runner"]["roles"] == ["topic"] and nodes["Ridley Scott"]["roles"] == ["answer", "gold"]
        assert _edges(view, "chosen") == _edges(view, "gold") == {("Blade Runner", "film.film.directed_by", "Ridley Scott")}
        assert ("Blade Runner", "film.film.genre", "Science Fiction") in _edges(view, "explored")
        assert "m.0kq90" in nodes  # a compound value has no name: its id is shown

        # a gold path of two hops, walked on the store: back from the director to his other film
        two = listed["questions"][1]
        view = client.request("POST", "/v1/explorer/graph",
                              {"method": "walker", "record": {**record, "answers": two["answers"], "answer_ids": two["answer_ids"]},
                               "path": two["path"], "path_forward": two["path_forward"]})[1]
        assert _edges(view, "gold") == {("Blade Runner", "film.film.directed_by", "Ridley Scott"),
                                        ("Alien", "film.film.directed_by", "Ridley Scott")}
        assert _by_label(view)["Alien"]["roles"] == ["gold"]

        for method, path, body, status, message in [
            ("GET", "/v1/explorer/questions?source=/etc/passwd", None, 400, "unknown question set '/etc/passwd': use one of"),
            ("GET", "/v1/explorer/questions?source=sample-questions.jsonl&limit=1000", None, 422, "limit"),
            ("POST", "/v1/explorer/graph", {"method": "walker", "record": record, "path": ["film.film.genre"] * 9}, 400,
             "path: 9 hops"),
            ("POST", "/v1/explorer/graph", {"method": "walker", "record": record, "path": ["not a relation"]}, 400,
             "invalid relation name"),
            ("POST", "/v1/explorer/graph", {"method": "ldr", "record": {"topic": ["m.0kq01"], "trace": {"g_k": [1, 2]}}}, 400,
             "record: not a ldr record"),
            ("POST", "/v1/explorer/graph", {"method": "walker"}, 422, "record: Field required"),
            # a lone surrogate (a JSON \\ud800 escape) anywhere in the body is refused before any work
            ("POST", "/v1/explorer/graph", {"method": "walker", "record": {**record, "answers": ["\ud800"]}}, 400,
             "record.answers[0] '\\ud800': it is not valid Unicode"),
            ("POST", "/v1/explorer/graph", {"method": "rog", "record": {"topic": ["m.0kq01"], "trace": {"paths": [["a", "\udc00"]]}}},
             400, "record.trace.paths[0][1] '\\udc00': it is not valid Unicode"),
            ("POST", "/v1/explorer/graph", {"method": "walker", "record": record, "path": ["\ud800"]}, 400, "path[0] '\\ud800'"),
        ]:
            got, answer = client.request(method, path, body)
            assert got == status and message in answer["detail"], (path, body, answer)
        status, answer = client.request("GET", "/v1/explorer/questions?source=sample-questions.jsonl&limit=abc")
        assert (status, answer["error"]) == (422, "RequestParameterError")
        assert "query.limit: Input should be a valid integer" in answer["detail"]
        assert client.get("/v1/health")["status"] == "ok"


def test_a_record_with_lists_past_the_bound_is_refused_and_one_at_it_is_drawn(oxigraph):
    """A record's lists are bounded (the graph's work grows with them), and its ids and answers
    are lists; one at the bound, with answers, predictions and topics that name no node of the
    graph, is drawn."""
    most = MAX_RECORD_ITEMS
    with served(oxigraph, ServeSettings(timeout=30)) as client:
        for record, field in [
            ({"answers": [f"a{i:07d}" for i in range(most + 1)]}, "record.answers"),
            ({"prediction": ["x"] * (most + 1)}, "record.prediction"),
            ({"topic": ["m.0kq01"] * (most + 1)}, "record.topic"),
            ({"trace": {"paths": ["a → r → b"] * (most + 1)}}, "record.trace.paths"),
            ({"trace": {"searches": [{"steps": [{"top": [["a → r → b"]] * (most + 1)}]}]}}, "record.trace.searches[0].steps[0].top"),
        ]:
            got, answer = client.request("POST", "/v1/explorer/graph", {"method": "rog", "record": record})
            assert got == 400 and f"{field}: {most + 1:,} items" in answer["detail"], (field, answer)
        # a text where a list belongs is refused, not drawn letter by letter
        for record, says in [({"topic": "m.0kq01"}, "record.topic: a str; send a list"),
                             ({"prediction": "Alien", "trace": {"paths": ["a → r → b"]}}, "record.prediction: a str"),
                             ({"answer_ids": {"m.0kq02": 1}}, "record.answer_ids: a dict")]:
            got, answer = client.request("POST", "/v1/explorer/graph", {"method": "rog", "record": record})
            assert got == 400 and says in answer["detail"], (record, answer)
        record = {"answers": [f"a{i:07d}" for i in range(most)], "prediction": [f"p{i:07d} is it" for i in range(most)],
                  "answer_ids": [f"m.a{i}" for i in range(most)], "topic": [f"m.t{i}" for i in range(most)],
                  "trace": {"paths": [f"t{i:07d} → r → p{i:07d}" for i in range(most)]}}
        got, view = client.request("POST", "/v1/explorer/graph", {"method": "rog", "record": record})
        assert got == 200 and {"gold", "answer", "topic"} <= {r for n in view["nodes"] for r in n["roles"]}
        ldr = {"topic": ["m.t0"], "prediction_ids": [f"m.p{i}" for i in range(most)],
               "trace": {"g_k": [[f"m.t{i}", "r", f"m.p{i}"] for i in range(most)]}}
        got, view = client.request("POST", "/v1/explorer/graph", {"method": "ldr", "record": ldr})
        assert got == 200 and _edges(view, "chosen") == {("m.t0", "r", "m.p0")}
        assert client.get("/v1/stats")["in_flight"] == 0
        assert client.op("names", ids=["m.0kq01"])["names"] == {"m.0kq01": "Blade Runner"}


def test_the_page_is_open_and_its_endpoints_take_the_token(oxigraph):
    with served(oxigraph, ServeSettings(token="s3cret")) as client:
        anonymous = ServeClient(client.url)
        page, headers = _get(client.url + "/explorer")
        assert page.startswith("<!doctype html>") and "/explorer/static/vendor/cytoscape.min.js" in page
        assert "https://" not in page  # nothing from elsewhere: the page runs on this server alone
        # no script but the server's own files runs, and no other site frames the page
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "'unsafe-inline'" not in policy and "frame-ancestors 'none'" in policy
        assert (headers["X-Content-Type-Options"], headers["X-Frame-Options"]) == ("nosniff", "DENY")
        # the page's files (the page among them) come with the same headers
        assert _get(client.url + "/explorer/static/explorer.html")[1]["Content-Security-Policy"] == policy
        script, headers = _get(client.url + "/explorer/static/vendor/cytoscape.min.js")
        assert "cytoscape" in script[:2000] and len(script) > 100_000
        assert {k: headers[k] for k in PAGE_HEADERS} == PAGE_HEADERS
        assert anonymous.request("GET", "/v1/explorer/sources")[0] == 401
        assert anonymous.request("POST", "/v1/explorer/graph", {"method": "rog", "record": {}})[0] == 401
        assert client.get("/v1/explorer/sources") == {"sources": client.get("/v1/explorer/sources")["sources"]}
        anonymous.close()


def _get(url: str) -> tuple[str, Any]:
    """The text at ``url`` and the headers it came with."""
    from urllib.request import urlopen

    with urlopen(url, timeout=30) as response:
        return response.read().decode(), response.headers


@pytest.mark.shared_data
def test_the_datasets_questions_come_with_metaqas_gold_path(oxigraph, shared_data):
    with served(oxigraph) as client:
        assert "metaqa-2hop" in client.get("/v1/explorer/sources")["sources"]
        listed = client.get("/v1/explorer/questions?source=metaqa-2hop&limit=3")
        assert listed["total"] > 1000 and len(listed["questions"]) == 3
        q = listed["questions"][0]
        assert q["qtype"] == "director_to_movie_to_language"
        assert (q["path"], q["path_forward"]) == (["directed_by", "in_language"], [False, True])


# ----------------------------------------------------------------------------- the page in a browser
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, driven by its chromedriver (`make browser` installs both)."""
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        missing("chromium and chromedriver are not installed: make browser")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,860",
                     "--hide-scrollbars"):
        options.add_argument(argument)
    try:
        opened = webdriver.Chrome(options=options, service=Service(driver))
    except WebDriverException as e:
        missing(f"chromium does not start: {e.msg}")
    # every page keeps what its content security policy refused (:func:`_answer_on_page` checks it is nothing)
    opened.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": (
        "window.__refused = []; document.addEventListener('securitypolicyviolation',"
        " (e) => window.__refused.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`));")})
    yield opened
    opened.quit()


def _wait(browser: Any, condition: Any, timeout: float) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def _answer_on_page(browser: Any, url: str, method: str, config: str, timeout: float, *, question: int | None = None,
                    typed: tuple[str, str] | None = None) -> dict[str, Any]:
    """Load the page, pick question ``question`` of the list (or type ``typed``: text and topics),
    answer it with ``method`` and return what cytoscape drew."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(url + "/explorer")
    _wait(browser, lambda b: b.find_element(By.ID, "status").get_attribute("data-state") in ("ready", "error"), 60)
    assert browser.find_element(By.ID, "status").get_attribute("data-state") == "ready", browser.find_element(By.ID, "status").text
    if question is not None:
        _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#questions li")) > question, 30)
        browser.find_elements(By.CSS_SELECTOR, "#questions li")[question].click()
    if typed is not None:
        for field, value in zip(("question", "topics"), typed):
            browser.find_element(By.ID, field).clear()
            browser.find_element(By.ID, field).send_keys(value)
        for field in ("gold", "gold-path"):
            browser.find_element(By.ID, field).clear()
    Select(browser.find_element(By.ID, "method")).select_by_value(method)
    browser.find_element(By.ID, "config").clear()
    browser.find_element(By.ID, "config").send_keys(config)
    browser.find_element(By.ID, "answer").click()
    _wait(browser, lambda b: b.find_element(By.ID, "status").get_attribute("data-state") in ("done", "error"), timeout)
    status = browser.find_element(By.ID, "status")
    assert status.get_attribute("data-state") == "done", status.text
    drawn = browser.execute_script(
        "return {nodes: cy.nodes().map(n => ({label: n.data('label'), roles: n.data('roles'), x: n.renderedPosition('x')})),"
        " edges: cy.edges().map(e => [e.source().data('label'), e.data('relation'), e.target().data('label'), e.data('roles')]),"
        " extent: cy.extent()}"
    )
    drawn["times"] = browser.find_element(By.ID, "times").text
    drawn["predicted"] = browser.find_element(By.ID, "predicted").text
    assert browser.execute_script("return window.__refused") == []  # the page works within its own policy
    return drawn


def _roles(drawn: dict[str, Any]) -> dict[str, list[str]]:
    return {n["label"]: n["roles"] for n in drawn["nodes"]}


def _drawn_edges(drawn: dict[str, Any], role: str) -> set[tuple[str, str, str]]:
    return {(s, r, t) for s, r, t, roles in drawn["edges"] if role in roles}


def test_the_page_answers_a_picked_and_a_typed_question_and_draws_the_reasoning(oxigraph, walker, questions_file, browser):
    with served(oxigraph, ServeSettings(questions=str(questions_file))) as client:
        drawn = _answer_on_page(browser, client.url, "walker", "{}", 60, question=0)
        roles = _roles(drawn)
        assert roles["Blade Runner"] == ["topic"] and roles["Ridley Scott"] == ["answer", "gold"]
        assert _drawn_edges(drawn, "chosen") == _drawn_edges(drawn, "gold") == {
            ("Blade Runner", "film.film.directed_by", "Ridley Scott")}
        assert {"Science Fiction", "1982-06-25", "m.0kq90"} <= set(roles)
        assert len({round(n["x"]) for n in drawn["nodes"]}) > 1  # laid out, not piled up
        assert drawn["predicted"] == "Ridley Scott" and re.fullmatch(r"store [\d.]+ s · model [\d.]+ s · total [\d.]+ s", drawn["times"])

        drawn = _answer_on_page(browser, client.url, "walker", '{"batch_size": 2}', 60, typed=("what genre is [Alien]", "m.0kq02"))
        roles = _roles(drawn)
        assert roles["Alien"] == ["topic"] and roles["Science Fiction"] == ["answer"] and roles["Horror"] == ["answer"]
        assert not _drawn_edges(drawn, "gold") and "(not given)" in _wait(
            browser, lambda b: b.find_element("id", "gold-answers").text, 5)


#: names, a value and a question that run script wherever a page takes them as HTML (each sets
#: window.__pwned), or break out of an attribute, a textarea or the text's direction
HOSTILE_NAMES = {"m.h1": '<img src=x onerror="window.__pwned=1">',
                 "m.h2": "<script>window.__pwned=2</script>\"'><svg onload=window.__pwned=3>"}
HOSTILE_VALUE = "</textarea><iframe src=javascript:top.__pwned=4></iframe>"
HOSTILE_QUESTION = {"id": "\"'><img src=x onerror=window.__pwned=5>",
                    "question": "who directed </textarea><img src=x onerror=window.__pwned=6> \u202eti",
                    "answer": ["javascript:window.__pwned=7"], "q_entity": ["m.h1"], "a_entity": ["m.h2"]}


def test_the_page_shows_hostile_names_and_questions_as_text_and_runs_none_of_them(walker, tmp_path, browser):
    from selenium.webdriver.common.by import By

    from engine.stores.oxigraph import OxigraphStore

    questions = tmp_path / "hostile.jsonl"
    questions.write_text(json.dumps(HOSTILE_QUESTION) + "\n", encoding="utf-8")
    triples = [Triple(i, NAME_RELATION, Literal(name)) for i, name in HOSTILE_NAMES.items()]
    triples += [Triple("m.h1", "film.film.directed_by", "m.h2"), Triple("m.h1", "film.film.tagline", Literal(HOSTILE_VALUE))]
    with OxigraphStore(None) as store, served(store, ServeSettings(questions=str(questions))) as client:
        store.add_triples(triples)
        drawn = _answer_on_page(browser, client.url, "walker", "{}", 60, question=0)
        assert browser.execute_script("return window.__pwned") is None
        assert browser.execute_script("return document.querySelectorAll('img, iframe, svg, object, embed').length") == 0
        assert browser.execute_script("return document.scripts.length") == 2  # cytoscape and the page's own
        listed = browser.find_element(By.CSS_SELECTOR, "#questions li")
        assert listed.get_property("textContent") == HOSTILE_QUESTION["question"]
        assert listed.get_attribute("title") == f"{HOSTILE_QUESTION['id']}: {HOSTILE_QUESTION['answer'][0]}"
        assert browser.find_element(By.ID, "question").get_property("value") == HOSTILE_QUESTION["question"]
        assert drawn["predicted"] == HOSTILE_NAMES["m.h2"]
        assert browser.find_element(By.ID, "gold-answers").get_property("textContent") == HOSTILE_QUESTION["answer"][0]
        roles = _roles(drawn)
        assert roles[HOSTILE_NAMES["m.h1"]] == ["topic"] and roles[HOSTILE_NAMES["m.h2"]] == ["answer", "gold"]
        assert HOSTILE_VALUE in roles


@pytest.mark.model
def test_kgqa_serve_explorer_draws_rog_with_the_offline_model_screenshot(tmp_path, questions_file, kgqa_script, browser):
    """RoG answers through `kgqa serve`; the page draws its plans' paths; the screenshot is the docs' picture."""
    store = tmp_path / "store"
    from engine.cli.demo import sample_path

    subprocess.run([str(kgqa_script), "load", sample_path(), "--store", str(store), "--no-progress"], check=True, capture_output=True)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as err:  # a file, not a pipe: loading the model writes much
        process = subprocess.Popen(
            [str(kgqa_script), "serve", "--store", str(store), "--port", str(port), "--questions", str(questions_file),
             "--method-option", "rog.model=SmolLM2-135M-Instruct", "--method-option", "rog.k=3"],
            stderr=err, env=child_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while "question explorer at /explorer" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        browser.set_window_size(1400, 1000)
        drawn = _answer_on_page(browser, url, "rog", '{"answer_mode": "paths", "max_hops": 2, "k": 3}', 600, question=1)
        roles = _roles(drawn)
        assert "topic" in roles["Blade Runner"] and "gold" in roles["Alien"]
        assert _drawn_edges(drawn, "gold") == {("Blade Runner", "film.film.directed_by", "Ridley Scott"),
                                               ("Alien", "film.film.directed_by", "Ridley Scott")}
        assert _drawn_edges(drawn, "explored") and _drawn_edges(drawn, "chosen") <= _drawn_edges(drawn, "explored")
        assert any("answer" in r for r in roles.values())
        assert float(re.search(r"model ([\d.]+) s", drawn["times"]).group(1)) > 0
        shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "explorer.png")
        shot.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
