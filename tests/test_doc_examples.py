"""The docs' examples run as written, on the data they name.

The README's Quickstart commands build the workspace the examples assume (``kgqa-data/metaqa``
from the real MetaQA KB, ``rog.jsonl`` from the shipped planner, and ``kgqa-data/demo`` as ``make
demo`` loads it); then every Python block of the README and of every page under docs/ runs, a
page's blocks in order in one namespace, the command-line examples of the pages that need no
other server or file, and the serving page's requests against ``kgqa serve``. An expression an
example shows must answer something: an example whose answer is empty (an id the store does not
hold, a relation it lacks) teaches the wrong thing.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import re
import shlex
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engine.servers.base import free_port
from engine.store import Store
from tests.cli_process import ROOT, child_env, run_kgqa, wait_listening

pytestmark = [pytest.mark.model, pytest.mark.shared_data]

PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "generated" not in p.parts)]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
#: shell examples run as they stand, each named by its page and first line: those that need only
#: the workspace's stores and files (the others name servers, dumps or files of your own)
SHELL_EXAMPLES = [
    ("README.md", "kgqa load $KGQA_DATA/metaqa/kb.txt.gz"),  # the Quickstart: the workspace itself
    ("docs/operations.md", "kgqa query relations m.0kq01"),
    ("docs/raw-queries.md", "kgqa query query"),
    ("docs/evaluation.md", "kgqa eval rog.jsonl"),
]
#: the MCP page's client connects to a running ``kgqa mcp`` at this address; the test starts one
#: over the demo store on a free port and points the example at it
MCP_URL = "http://127.0.0.1:8001/mcp"


def blocks(page: Path, language: str) -> list[str]:
    """The fenced blocks of ``language`` in ``page``, in order."""
    return [body for lang, body in FENCE.findall(page.read_text(encoding="utf-8")) if lang == language]


def shell_block(page: str, first: str) -> str:
    (block,) = [b for b in blocks(ROOT / page, "bash") if b.startswith(first)]
    return block


def commands(block: str, data: Path) -> list[list[str]]:
    """The command lines of a shell block: continuations joined, comments dropped, $KGQA_DATA set."""
    joined = block.replace("\\\n", " ").replace("$KGQA_DATA", str(data))
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def run_shell(block: str, workspace: Path, data: Path) -> list[subprocess.CompletedProcess[str]]:
    done = []
    for argv in commands(block, data):
        assert argv[0] == "kgqa", f"not a kgqa command: {argv}"
        result = run_kgqa(*argv[1:], timeout=900, cwd=workspace, env={"KGQA_DATA": str(data)})
        shown = " ".join(argv)
        assert result.returncode == 0, f"{shown}\n{result.stderr}"
        assert result.stdout.strip(), f"{shown} printed nothing"
        assert "kgqa: note:" not in result.stderr, f"{shown} answered nothing: {result.stderr}"
        done.append(result)
    return done


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, shared_data) -> Path:
    """A folder holding what the Quickstart and ``make demo`` leave behind."""
    folder = tmp_path_factory.mktemp("newcomer")
    demo = run_kgqa("demo", timeout=300, cwd=folder)
    assert demo.returncode == 0, demo.stderr
    run_shell(shell_block(*SHELL_EXAMPLES[0]), folder, shared_data)
    return folder


#: the fields that hold an operation's answer in its result (engine/results.py)
ANSWER_FIELDS = ("rows", "edges", "paths", "hits", "ids", "answers")


def empty(value: Any) -> bool:
    """Whether an operation's answer holds nothing: each of a result's answer fields empty and no
    count, or a mapping whose every value is None (names of ids the store does not hold)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        answers = [getattr(value, f) for f in ANSWER_FIELDS if hasattr(value, f)]
        return bool(answers) and not any(answers) and getattr(value, "count", None) is None
    if isinstance(value, dict):
        return all(v is None for v in value.values())
    return isinstance(value, (list, tuple)) and not value


def run_python(code: str, namespace: dict[str, Any], where: str) -> None:
    """Run one block statement by statement; each bare expression must answer something."""
    for statement in ast.parse(code).body:
        line = ast.get_source_segment(code, statement)
        if isinstance(statement, ast.Expr):
            value = eval(compile(ast.Expression(statement.value), where, "eval"), namespace)
            assert not empty(value), f"{where}: {line} answered nothing: {value!r}"
        else:
            exec(compile(ast.Module([statement], type_ignores=[]), where, "exec"), namespace)


@contextmanager
def _kgqa_listening(workspace: Path, *argv: str) -> Iterator[int]:
    """``kgqa ARGV… --port P`` started in ``workspace``, once it accepts connections on P."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "engine.cli.main", *argv, "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workspace, env=child_env())
    try:
        wait_listening(process, port)
        yield port
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.fixture
def mcp_server(workspace):
    with _kgqa_listening(workspace, "mcp", "--store", "kgqa-data/demo", "--transport", "http") as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def served(workspace):
    """``kgqa serve`` over the Quickstart's MetaQA store, as the serving page starts it."""
    with _kgqa_listening(workspace, "serve", "--store", "kgqa-data/metaqa") as port:
        yield f"http://127.0.0.1:{port}"


def _post(url: str, body: str) -> Any:
    request = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def test_the_quickstart_builds_the_workspace(workspace):
    assert (workspace / "kgqa-data" / "metaqa").is_dir() and (workspace / "rog.jsonl").is_file()


PYTHON_PAGES = [p for p in PAGES if blocks(p, "python")]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[str(p.relative_to(ROOT)) for p in PYTHON_PAGES])
def test_every_python_example_runs_and_answers(page, workspace, shared_data, request, monkeypatch, capsys):
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("KGQA_DATA", str(shared_data))
    name = str(page.relative_to(ROOT))
    namespace: dict[str, Any] = {"__name__": "__doc_example__"}
    try:
        for number, code in enumerate(blocks(page, "python"), 1):
            if MCP_URL in code:
                code = code.replace(MCP_URL, request.getfixturevalue("mcp_server"))
            run_python(code, namespace, f"{name}, Python example {number}")
    finally:
        for value in namespace.values():
            if isinstance(value, Store):
                value.close()
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("page, first", SHELL_EXAMPLES[1:], ids=[p for p, _ in SHELL_EXAMPLES[1:]])
def test_command_line_examples_run_and_answer(page, first, workspace, shared_data):
    run_shell(shell_block(page, first), workspace, shared_data)


def test_the_serving_examples_answer(served, shared_data):
    """The serving page's curl call and its /v1/answer body, sent to a server on another port."""
    page = ROOT / "docs" / "serve.md"
    (curl,) = [argv for block in blocks(page, "bash") for argv in commands(block, shared_data) if argv[0] == "curl"]
    url = urllib.parse.urlsplit("http://" + next(a for a in curl[1:] if a.startswith("localhost:")))
    assert url.port == 8000 and not empty(_post(served + url.path, curl[curl.index("-d") + 1])["paths"])
    (answer,) = [block for block in blocks(page, "json") if block.startswith("POST /v1/answer")]
    target, body = answer.split("\n", 1)
    (prediction,) = _post(served + target.split()[1], body)["predictions"]
    assert prediction["prediction"], prediction


def test_the_examples_that_run_are_found():
    """A page rewritten so that an example listed here is gone fails here, not silently."""
    for page, first in SHELL_EXAMPLES:
        assert shell_block(page, first)
    assert {str(p.relative_to(ROOT)) for p in PYTHON_PAGES} >= {"README.md", "docs/getting-started.md", "docs/operations.md",
                                                                  "docs/methods/index.md", "docs/mcp.md"}
    assert any(MCP_URL in b for b in blocks(ROOT / "docs" / "mcp.md", "python"))
