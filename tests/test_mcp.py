"""``kgqa mcp``: the operations as MCP tools, called by the official SDK's own client.

Over streamable HTTP on every store kind, and over stdio through the ``kgqa mcp`` command, every
tool answers what the Python API answers on the same store; its listing names and describes
every operation; a bad call is a tool error that names what is wrong, never a crash or a write."""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from engine.open import open_store
from engine.results import to_json
from engine.serve.mcp import create_server, http_app
from engine.serve.ops import OPERATIONS
from engine.serve.server import Background
from engine.serve.settings import ServeSettings
from engine.servers.base import free_port
from engine.store import Store
from tests.cli_process import ROOT, child_env, run_kgqa, wait_listening
from tests.test_serve import CASES, GRAPH, YEAR, Gated, _writes, raw_query


def session(target: Any, check: Callable[[Client], Awaitable[None]]) -> None:
    """Run ``check`` with an SDK client connected to ``target`` (a URL or stdio parameters)."""

    async def main() -> None:
        async with Client(target, read_timeout_seconds=60) as client:
            await check(client)

    anyio.run(main)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    """A tool's structured answer; a tool error fails with its text."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, (name, arguments, result.content)
    return result.structured_content


async def error(client: Client, name: str, arguments: Any) -> str:
    """The text of the tool error that calling ``name`` gives."""
    result = await client.call_tool(name, arguments)
    assert result.is_error and result.structured_content is None, (name, arguments, result)
    (content,) = result.content
    return content.text


async def every_tool_answers_as_the_python_api(client: Client, store: Store) -> None:
    listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == list(OPERATIONS)
    for tool in listed:
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.input_schema["type"] == "object" and tool.input_schema["additionalProperties"] is False
        assert len(tool.description or "") > 200 and "Returns {" in (tool.description or "")
        assert all(p.get("description") for p in tool.input_schema["properties"].values()), tool.name
    for name, body, python in CASES:
        assert await call(client, name, body) == to_json(python(store)), (name, body)
    text, params = raw_query(store)
    result = store.query(text, params)
    assert await call(client, "query", {"text": text, "params": params}) == {
        "columns": result.columns, "rows": to_json(result.rows), "truncated": False,
    }
    cut = await call(client, "expand", {"ids": ["m.0kq01"], "direction": "out", "limit": 3})
    assert cut["truncated"] and len(cut["edges"]) == 3


#: calls every store refuses, and a part of the tool error's text
BAD: list[tuple[str, Any, str]] = [
    ("expand", {"ids": [42]}, "RequestBodyError: expand: ids[0]: Input should be a valid string"),
    ("expand", {"ids": "m.0kq01"}, "ids: Input should be a valid list"),
    ("expand", {}, "ids: Field required"),
    ("expand", {"ids": [""]}, "invalid node id '' at ids[0]"),
    ("expand", {"ids": ["m.0kq01"], "relations": ["film film"]}, "invalid relation name 'film film'"),
    ("expand", {"ids": ["m.0kq01"], "direction": "sideways"}, "direction: Input should be 'out', 'in' or 'both'"),
    ("expand", {"ids": ["m.0kq01"], "hops": 2}, "hops: Extra inputs are not permitted"),
    ("expand", {"ids": ["m.0kq01"], "limit": 101}, "limit 101 is above this server's maximum of 100 rows"),
    ("expand", {"ids": ["m.0kq01"], "timeout": 11}, "timeout 11 s is above this server's maximum of 10 s"),
    ("relations", {"ids": [{"value": "x", "datatype": "not an iri"}]}, "invalid datatype IRI"),
    ("follow_paths", {"seeds": ["m.0kq01"], "path": []}, "must have 1 to 8 relations"),
    ("subgraph", {"seeds": ["m.0kq01"], "hops": 99}, "invalid hops 99"),
    ("search", {"text": " "}, "search text must be a non-empty string"),
    ("execute", {"sexpr": "(JOIN film.film.directed_by"}, "unbalanced parentheses"),
    ("no_such_tool", {"ids": ["m.0kq01"]}, "unknown operation 'no_such_tool': use one of relations, expand"),
]


async def bad_calls_are_tool_errors(client: Client, store: Store) -> None:
    for name, arguments, message in BAD:
        assert message in await error(client, name, arguments), (name, arguments)
    for text in _writes(store):
        assert "query" in (await error(client, "query", {"text": text})).lower(), text
    # the server still answers after every refusal
    assert await call(client, "names", {"ids": ["m.0kq01"]}) == {"names": {"m.0kq01": "Blade Runner"}, "truncated": False}


def test_every_tool_over_streamable_http_answers_as_the_python_api_and_bad_calls_are_tool_errors(store):
    opened = store(GRAPH)
    before, names = opened.count_triples(), opened.names(["m.0kq01", "m.x", "m.y"])
    settings = ServeSettings(timeout=10, max_rows=100)
    with Background(http_app(create_server(opened, settings), settings, "127.0.0.1"), settings=settings) as server:

        async def check(client: Client) -> None:
            await every_tool_answers_as_the_python_api(client, opened)
            await bad_calls_are_tool_errors(client, opened)

        session(f"{server.url}/mcp", check)
    assert opened.count_triples() == before
    assert opened.names(["m.0kq01", "m.x", "m.y"]) == names


def _post_initialize(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    """POST an MCP initialize request (what a client sends first) and return the status and JSON or text body."""
    import json
    import urllib.error
    import urllib.request

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json",
                                                 "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_with_a_token_the_http_transport_answers_only_requests_that_carry_it():
    opened = open_store("memory:")
    settings = ServeSettings(timeout=10, max_rows=100, token="s3cret")
    with Background(http_app(create_server(opened, settings), settings, "127.0.0.1"), settings=settings) as server:
        url = f"{server.url}/mcp"
        status, body = _post_initialize(url, {})
        assert status == 401 and body == {"error": "UnauthorizedError", "detail": (
            "this server needs a bearer token: send the header Authorization: Bearer <token>")}
        assert _post_initialize(url, {"Authorization": "Bearer wrong"}) == (401, {"error": "UnauthorizedError",
                                                                             "detail": "wrong bearer token"})
        status, text = _post_initialize(url, {"Authorization": "Bearer s3cret"})
        assert status == 200 and '"serverInfo"' in text


def test_the_tools_describe_the_servers_own_bounds():
    from engine.stores.oxigraph import OxigraphStore

    with OxigraphStore(None) as opened:

        async def check(client: Client) -> None:
            (expand,) = [t for t in (await client.list_tools()).tools if t.name == "expand"]
            assert "At most 7 rows" in (expand.description or "") and "Deadline 2.5 s" in (expand.description or "")

        session(create_server(opened, ServeSettings(timeout=2.5, max_rows=7)), check)


def test_a_stuck_call_is_a_tool_error_at_its_deadline_and_one_past_the_concurrency_limit_is_refused():
    from engine.stores.oxigraph import OxigraphStore

    with OxigraphStore(None) as opened:
        opened.add_triples(GRAPH)
        gated = Gated(opened)
        server = create_server(gated, ServeSettings(max_concurrency=1, workers=2))

        async def check(client: Client) -> None:
            started = time.monotonic()
            message = await error(client, "expand", {"ids": ["m.0kq01"], "timeout": 0.5})
            assert "DeadlineError" in message and "deadline of 0.5 s" in message and time.monotonic() - started < 5
            assert "--max-concurrency" in await error(client, "names", {"ids": ["m.0kq01"]})  # the stuck call holds its place
            gated.gate.set()
            deadline = time.monotonic() + 30
            while (await client.call_tool("names", {"ids": ["m.0kq01"]})).is_error:
                assert time.monotonic() < deadline
                await anyio.sleep(0.05)
            assert await call(client, "expand", {"ids": ["m.0kq01"], "relations": ["film.film.genre"]}) == to_json(
                opened.expand(["m.0kq01"], ["film.film.genre"]))

        session(server, check)


def test_a_call_with_many_bad_arguments_is_a_short_tool_error():
    from engine.stores.oxigraph import OxigraphStore

    with OxigraphStore(None) as opened:

        async def check(client: Client) -> None:
            message = await error(client, "names", {"ids": [0] * 1000})
            assert "ids[9]: Input should be a valid string; and 990 more" in message and len(message) < 1000
            assert "at most 100000 items" in await error(client, "names", {"ids": ["m.0kq01"] * 100_001})

        session(create_server(opened, ServeSettings()), check)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    """An embedded store on disk holding the test graph (``kgqa mcp`` opens it read-only)."""
    path = tmp_path_factory.mktemp("mcp") / "store"
    with open_store(str(path)) as opened:
        opened.add_triples(GRAPH)
    return path


def test_kgqa_mcp_over_stdio_answers_every_tool_as_the_python_api(store_dir):
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "engine.cli.main", "mcp", "--store", str(store_dir), "--max-rows", "100",
                                                    "--timeout", "10"],
        env=child_env(), cwd=str(ROOT),
    )
    with open_store(str(store_dir), read_only=True) as opened:

        async def check(client: Client) -> None:
            await every_tool_answers_as_the_python_api(client, opened)
            await bad_calls_are_tool_errors(client, opened)
            # a literal argument, written as the API writes literals
            assert await call(client, "relations", {"ids": [YEAR.to_json()], "direction": "in"}) == to_json(
                opened.relations([YEAR], "in"))

        session(parameters, check)


def test_kgqa_mcp_over_stdio_refuses_the_flags_of_the_http_transport(store_dir):
    result = run_kgqa("mcp", "--store", str(store_dir), "--port", "9999", "--token", "s3cret", timeout=60)
    assert result.returncode == 2
    assert "--port, --token apply with --transport http only" in result.stderr and "Traceback" not in result.stderr
    alone = run_kgqa("mcp", "--store", str(store_dir), "--port", "9999", timeout=60)
    assert alone.returncode == 2 and "--port applies with --transport http only" in alone.stderr
    assert alone.stderr.rstrip().endswith("or leave it out")


def test_kgqa_mcp_over_http_serves_on_loopback(store_dir):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli.main", "mcp", "--store", str(store_dir), "--transport", "http", "--port", str(port)],
        stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT,
    )
    try:
        assert f"MCP tools at http://127.0.0.1:{port}/mcp" in process.stderr.readline()

        async def check(client: Client) -> None:
            assert await call(client, "search", {"text": "Alien"}) == {"hits": [{"id": "m.0kq02", "name": "Alien"}], "truncated": False}

        wait_listening(process, port)
        session(f"http://127.0.0.1:{port}/mcp", check)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err


class StdioProcess:
    """``kgqa mcp`` over stdio on ``store_dir``, driven line by line as a client's transport
    drives it (initialized), so that lines no SDK client sends can be sent."""

    def __init__(self, store_dir: Path, *flags: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "engine.cli.main", "mcp", "--store", str(store_dir), *flags],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), cwd=ROOT,
        )
        self.send(json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}))
        # stdout is read only when an answer is asked for: a client that does not read leaves it to fill
        self.wanted, self.lines = threading.Semaphore(0), queue.Queue[bytes]()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.answer()["id"] == "init"
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def __enter__(self) -> StdioProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()  # a test that failed midway leaves no server behind
        self.process.wait(timeout=60)

    def send(self, line: str | bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")) + b"\n")
        self.process.stdin.flush()

    def call(self, request_id: int, name: str, arguments: dict[str, Any]) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments}})

    def _read(self) -> None:
        assert self.process.stdout is not None
        line = b"-"
        while line:
            self.wanted.acquire()
            line = self.process.stdout.readline()
            self.lines.put(line)

    def answer(self) -> dict[str, Any]:
        """The next line on stdout, which must be one JSON-RPC message (waited for a generous minute)."""
        self.wanted.release()
        try:
            line = self.lines.get(timeout=60)
        except queue.Empty:
            raise AssertionError(f"no answer within a minute (the server is {self.process.poll() or 'running'})") from None
        assert line.endswith(b"\n"), (line[:300], self.process.poll())
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0" and ("result" in message) != ("error" in message), message
        return message

    def close(self) -> str:
        """Close stdin: the server ends, cleanly; its stderr."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            assert self.process.wait(timeout=60) == 0
        finally:
            self.process.kill()
            assert self.process.stderr is not None and self.process.stdout is not None
            err = self.process.stderr.read().decode()
            self.process.stderr.close()
        assert "Traceback" not in err, err
        return err


#: lines that are not JSON-RPC messages, and the JSON-RPC error code each is answered with
UNREADABLE: list[tuple[str, int]] = [
    ("hello", -32700),
    ('{"jsonrpc": "2.0", "id": 1, "method": "ping"', -32700),  # cut short
    ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {"text": "\\ud800"}}}',
     -32700),  # a lone surrogate
    ('{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}", -32700),
    ('{"jsonrpc": "2.0", "id": ' + "9" * 5000 + ', "method": "ping"}', -32700),
    ("42", -32600),
    ('[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600),  # a batch
    ('{"id": 1, "method": "ping"}', -32600),  # no jsonrpc
    ('{"jsonrpc": "2.0", "id": 1}', -32600),  # no method
]


def test_kgqa_mcp_over_stdio_answers_a_line_that_is_no_message_with_a_json_rpc_error_and_goes_on(store_dir):
    with StdioProcess(store_dir) as server:
        for line, code in UNREADABLE:
            server.send(line)
            answer = server.answer()
            assert answer["id"] is None and answer["error"]["code"] == code, (line[:100], answer)
            assert "the line is not" in answer["error"]["data"] and len(json.dumps(answer)) < 2000, answer
        # a tool name of a million characters is named, not echoed whole
        server.send(server.call(6, "x" * 1_000_000, {}))
        answer = server.answer()
        (content,) = answer["result"]["content"]
        assert answer["id"] == 6 and answer["result"]["isError"] and len(content["text"]) < 1000, answer
        assert content["text"].startswith("UnknownOperationError: unknown operation 'xxx")
        assert "(1,000,000 characters)" in content["text"]
        server.send(server.call(7, "names", {"ids": ["m.0kq01"]}))
        assert server.answer() == {"jsonrpc": "2.0", "id": 7, "result": {
            "content": [{"type": "text", "text": '{"names": {"m.0kq01": "Blade Runner"}, "truncated": false}'}],
            "isError": False, "structuredContent": {"names": {"m.0kq01": "Blade Runner"}, "truncated": False}}}
        server.close()


def ping(request_id: int, size: int) -> str:
    """A ping request padded to ``size`` bytes."""
    line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping", "params": {"pad": ""}})
    return line.replace('"pad": ""', '"pad": "' + "x" * (size - len(line)) + '"')


def list_tools(server: StdioProcess, request_id: int) -> None:
    """The server answers a tools/list request with every tool."""
    server.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}))
    answer = server.answer()
    assert answer["id"] == request_id and [t["name"] for t in answer["result"]["tools"]] == list(OPERATIONS), answer


def test_kgqa_mcp_over_stdio_refuses_a_line_longer_than_max_body_and_reads_on_past_it(store_dir):
    with StdioProcess(store_dir) as server:  # the default --max-body: 1 MiB
        server.send(ping(1, 1 << 20))
        assert server.answer() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        server.send(ping(2, (1 << 20) + 1))
        answer = server.answer()
        assert answer["id"] is None and answer["error"]["code"] == -32600, answer
        assert answer["error"]["data"].startswith("the line is longer than 1,048,576 bytes, the most this server reads "
                                                  "(--max-body)"), answer
        list_tools(server, 3)
        server.close()
    # a line many times the bound, in pieces, then lines that end within one read
    with StdioProcess(store_dir, "--max-body", "1000") as server:
        server.send(b"[" * 20_000_000 + b"\n" + ping(4, 1000).encode() + b"\n" + ping(5, 1001).encode())
        answers = [server.answer() for _ in range(3)]  # the ping's answer may come after the second error
        assert {"jsonrpc": "2.0", "id": 4, "result": {}} in answers, answers
        errors = [answer for answer in answers if "error" in answer]
        assert len(errors) == 2 and all("longer than 1,000 bytes" in e["error"]["data"] for e in errors), answers
        list_tools(server, 6)
        server.close()


#: lines whose id is no string or integer, or that are not UTF-8, and what their error says
REFUSED: list[tuple[bytes, int, str]] = [
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', -32600, "id must be a string or an integer, not an object"),
    (b'{"jsonrpc": "2.0", "id": [1], "method": "tools/list"}', -32600, "id must be a string or an integer, not an array"),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, "id must be a string or an integer, not true"),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, "id must be a string or an integer, not 1.5"),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, "id must be a string or an integer, not null"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {"text": "caf\xe9"}}}',
     -32700, "the line is not valid UTF-8 (byte 0xe9 at offset 107)"),
]


def test_kgqa_mcp_over_stdio_answers_an_id_that_is_no_string_or_integer_and_a_line_that_is_not_utf8(store_dir):
    with StdioProcess(store_dir) as server:
        for line, code, said in REFUSED:
            server.send(line)
            answer = server.answer()
            assert answer["id"] is None and answer["error"]["code"] == code and said in answer["error"]["data"], (line, answer)
        # a notification, which has no id, is still read and not answered
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}))
        list_tools(server, 7)
        server.close()


#: a process that claims its stdin as `kgqa mcp` does, and reports what fd 0 and a child it starts see
CLAIMING = """
import os, subprocess, sys
from engine.serve.mcp import claimed_stdin
with claimed_stdin() as stdin:
    child = subprocess.run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], capture_output=True, text=True,
                           timeout=30)
    print(os.readlink("/proc/self/fd/0"), child.stdout.strip(), stdin.readline().decode().strip(), sep="|", flush=True)
print(sys.stdin.readline().strip(), flush=True)
"""


def test_over_stdio_fd_0_points_at_the_null_device_so_no_child_reads_the_clients_lines():
    claiming = subprocess.Popen([sys.executable, "-c", CLAIMING], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=child_env(), cwd=ROOT)
    try:
        claiming.stdin.write("first\n")
        claiming.stdin.flush()
        assert claiming.stdout.readline().strip() == "/dev/null|''|first"
        claiming.stdin.write("second\n")  # fd 0 is the client's pipe again once the claim ends
        claiming.stdin.close()
        assert claiming.stdout.readline().strip() == "second"
        assert claiming.wait(timeout=60) == 0
    finally:
        claiming.kill()


def test_kgqa_mcp_over_stdio_reads_no_more_calls_while_its_bound_of_unanswered_ones_waits_to_be_read(store_dir):
    # --max-concurrency 1: at most 2 × 1 + 16 calls unanswered; past them stdin is not read, so a
    # client that sends without reading fills the pipe and waits, instead of the server holding every answer
    with StdioProcess(store_dir, "--max-concurrency", "1") as server:
        calls = 2000
        line = server.call(0, "names", {"ids": ["m.0kq01"] * 50})  # about 1 KB: the pipe holds few
        sent = 0

        def send_all() -> None:
            nonlocal sent
            for i in range(calls):
                server.send(line.replace('"id": 0', f'"id": {i}', 1))
                sent += 1

        writer = threading.Thread(target=send_all, daemon=True)
        writer.start()
        stalled_at, deadline = -1, time.monotonic() + 120
        while sent != stalled_at and sent < calls:  # until the writer stops getting its lines through
            stalled_at = sent
            writer.join(timeout=3)
            assert time.monotonic() < deadline
        assert sent < calls // 2, f"the server read {sent:,} of {calls:,} calls that no one read the answers of"
        # once the answers are read, it reads on and answers every call
        answered = {server.answer()["id"] for _ in range(calls)}
        assert answered == set(range(calls))
        writer.join(timeout=60)
        server.close()
