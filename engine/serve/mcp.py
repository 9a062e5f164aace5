"""The operation vocabulary as Model Context Protocol tools (the official ``mcp`` SDK), so that an
LLM agent can walk the graph: ``kgqa mcp --store URI`` serves them over stdio or streamable HTTP.

Every tool is one operation of :data:`engine.serve.ops.OPERATIONS`: the same arguments (the
Python method's parameter names), checked by the same models, run by the same
:func:`engine.serve.ops.run_operation` within the same bounds, answering the same JSON (as the
tool result's structured content, and as its text). The store is only read: the operations read,
and a raw query goes through the store's own guard, which refuses writes. A bad call is a tool
error whose text names the argument at fault, so that the model can correct it.
"""
from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import Server, ServerRequestContext
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from pydantic import ValidationError
from pydantic_core import from_json

from engine.errors import KGQAError, clipped
from engine.serve.errors import error_body
from engine.serve.limits import Workers
from engine.serve.ops import OPERATIONS, Operation, describe, operation, run_operation
from engine.serve.settings import ServeSettings, bounded_timeout
from engine.store import Store

log = logging.getLogger("kgqa.mcp")

#: what each tool answers and when to use it, beyond the operation's one-line summary
RETURNS: dict[str, str] = {
    "relations": "Returns {rows: [{id, relation, direction (out|in), count}]}. Start here to see which relations "
    "leave or enter an entity before you follow one.",
    "expand": "Returns {edges: [{src, relation, dst, forward}]}, where src is one of ids and forward is false when the "
    "stored edge points from dst to src. Name relations to keep a hub's answer small.",
    "follow_paths": "Returns {paths: [{nodes, relations, forward}]}: every walk from a seed along the relations in order "
    "(nodes has one more item than relations; forward says per hop whether it went the stored way).",
    "subgraph": "Returns {edges: [{subject, relation, object}], depth: [[node, layer]]} in the stored orientation. Fast "
    "growth: keep hops at 1 or 2 and name relations.",
    "shortest_paths": "Returns {paths: [{nodes, relations, forward}]}: how two entities are connected, ignoring direction.",
    "two_hop_relations": "Returns {rows: [{id, r1, relation, direction, count}]}: what can come after r1, to plan a "
    "second hop.",
    "names": "Returns {names: {id: name or null}}; an entity without a name (a compound value) answers its id.",
    "types": "Returns {types: {id: [class, ...]}}.",
    "search": "Returns {hits: [{id, name}]}: use it to find the id of an entity the question names.",
    "execute": "Returns {answers: [id or literal], count}: count is set (and answers empty) for a COUNT form.",
    "query": "Returns {columns, rows}; ids come back as plain strings, literals as {value, datatype} or {value, lang}. "
    "Prefer the other tools: this one is for what they cannot ask.",
}

_COMMON = (
    "Node ids are strings such as m.0abc (Freebase) or the dataset's own ids; a literal is written "
    '{"value": "1990", "datatype": "http://www.w3.org/2001/XMLSchema#gYear"} or {"value": "Paris", "lang": "en"}. '
    "Read-only."
)


def describe_tool(op: Operation, settings: ServeSettings) -> str:
    """The tool's description: what it does and returns, its bounds on this server."""
    bounded = "limit" in op.request.model_fields
    rows = f" At most {settings.max_rows:,} rows (fewer with limit); a cut answer says truncated: true." if bounded else ""
    return (f"{op.summary[0].upper()}{op.summary[1:]}. {RETURNS[op.name]}{rows} Deadline {settings.timeout:g} s "
            f"(lower it with timeout). {_COMMON}")


def tools(settings: ServeSettings) -> list[types.Tool]:
    """One tool per operation, its input schema the operation's request model."""
    return [
        types.Tool(
            name=op.name,
            title=op.name.replace("_", " "),
            description=describe_tool(op, settings),
            input_schema=op.request.model_json_schema(),
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False, idempotent_hint=True),
        )
        for op in OPERATIONS.values()
    ]


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def create_server(store: Store, settings: ServeSettings | None = None) -> Server[Any]:
    """The MCP server over ``store``: one tool per operation. The caller keeps the store."""
    settings = settings or ServeSettings()
    bounds = settings.bounds
    listed = tools(settings)

    @asynccontextmanager
    async def lifespan(server: Server[Any]) -> AsyncIterator[Workers]:
        workers = Workers(settings.workers, settings.max_concurrency)
        try:
            yield workers
        finally:
            workers.close()

    async def list_tools(ctx: ServerRequestContext[Workers], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: ServerRequestContext[Workers], params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            op = operation(params.name)
            request = op.parse(params.arguments or {})
            deadline = bounded_timeout(request.timeout, bounds.timeout)
            result = await ctx.lifespan_context.run(
                lambda expires: run_operation(store, op.name, request, bounds, expires), deadline
            )
        except KGQAError as e:
            body = error_body(e)
            return _error(f"{body['error']}: {body['detail']}")
        except Exception:
            log.exception("tool %s failed", params.name)
            return _error("InternalError: the server failed on this call; its log says why")
        text = json.dumps(result, ensure_ascii=False)
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=result)

    return Server(
        "kgqa-engine",
        title="kgqa-engine knowledge graph",
        instructions=(
            f"Read-only tools over a knowledge graph ({store.dialect} store). Find an entity's id with search, see its "
            "relations with relations, walk with expand or follow_paths, and name ids with names. Every tool takes "
            "batches: give several ids at once."
        ),
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


class _AnsweredStdio:
    """The stdio streams, with what the SDK's transport leaves out. A line that is not a JSON-RPC
    message is answered with a JSON-RPC error (the SDK drops it, and its client would wait on). At
    most ``most`` requests are held unanswered: past them no line is read until one is answered or
    cancelled (the SDK reads on, and a client that sends calls without reading their answers made
    it hold them all)."""

    def __init__(self, read: Any, write: Any, most: int) -> None:
        self._read, self._write, self.most = read, write, most
        self.unanswered = 0
        self._freed = anyio.Event()

    def _answered(self) -> None:
        self.unanswered = max(self.unanswered - 1, 0)
        self._freed.set()

    async def _settled(self) -> None:  # the dispatcher's hook for a request it leaves unanswered (cancelled)
        self._answered()

    async def receive(self) -> SessionMessage:
        while True:
            while self.unanswered >= self.most:
                self._freed = anyio.Event()
                await self._freed.wait()
            item = await self._read.receive()
            if isinstance(item, Exception):
                await self._write.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=_unreadable(item))))
                continue
            if isinstance(item.message, types.JSONRPCRequest):
                self.unanswered += 1
                return SessionMessage(item.message, metadata=ServerMessageMetadata(on_request_unanswered=self._settled))
            return item

    async def send(self, item: SessionMessage) -> None:
        await self._write.send(item)
        if isinstance(item.message, (types.JSONRPCResponse, types.JSONRPCError)) and item.message.id is not None:
            self._answered()

    def __aiter__(self) -> _AnsweredStdio:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._read.aclose()
        await self._write.aclose()

    async def __aenter__(self) -> _AnsweredStdio:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _unreadable(error: Exception) -> types.ErrorData:
    """The JSON-RPC error that answers a line that could not be read as a message."""
    if isinstance(error, _Refused):
        return error.error
    problems = error.errors() if isinstance(error, ValidationError) else []
    if any(p.get("type") == "json_invalid" for p in problems):
        why = problems[0].get("ctx", {}).get("error", "a decode error")
        return types.ErrorData(code=types.PARSE_ERROR, message="Parse error",
                               data=f"the line is not valid JSON ({clipped(str(why), 200)}): send one JSON-RPC message per line")
    detail = describe(problems) if problems else clipped(str(error), 300)
    return types.ErrorData(code=types.INVALID_REQUEST, message="Invalid Request",
                           data=f"the line is not a JSON-RPC 2.0 message: {detail}")


class _Refused(Exception):
    """A line refused before or past the SDK's validation; ``error`` answers it."""

    def __init__(self, code: int, data: str) -> None:
        super().__init__(data)
        self.error = types.ErrorData(code=code, message="Parse error" if code == types.PARSE_ERROR else "Invalid Request",
                                     data=data)


#: bytes read from stdin at a time
_CHUNK = 1 << 16


async def _lines(stdin: io.BufferedIOBase, most: int) -> AsyncIterator[bytes | None]:
    """The lines of ``stdin`` without their newline, read in chunks; None stands for a line longer
    than ``most`` bytes, whose rest is read past, never held."""
    line, skipping = bytearray(), False
    while chunk := await anyio.to_thread.run_sync(stdin.read1, _CHUNK, abandon_on_cancel=True):
        *ended, rest = chunk.split(b"\n")
        for part in ended:
            if not skipping:
                line += part
                yield bytes(line) if len(line) <= most else None
            line.clear()
            skipping = False
        if not skipping:
            line += rest
            if len(line) > most:
                yield None
                line.clear()
                skipping = True
    if line:
        yield bytes(line)


#: what JSON value an id is, named in the error that refuses it
_JSON_KINDS: dict[type, str] = {dict: "an object", list: "an array"}


def _message(line: bytes | None, most: int) -> SessionMessage | Exception:
    """The message on one line of stdin, validated as the SDK validates it, or what is wrong with it."""
    if line is None:
        return _Refused(types.INVALID_REQUEST, f"the line is longer than {most:,} bytes, the most this server reads "
                                               "(--max-body): send one JSON-RPC message per line, within it")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return _Refused(types.PARSE_ERROR, f"the line is not valid UTF-8 (byte 0x{line[e.start]:02x} at offset "
                                           f"{e.start:,}): send JSON text encoded in UTF-8")
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except Exception as e:  # as the SDK's transport catches it; _unreadable says what answers it
        return e
    # with an id the SDK does not take (an object, null, 1.5), a request validates as a notification: never answered
    if isinstance(message, types.JSONRPCNotification) and "id" in (raw := from_json(text)):
        kind = _JSON_KINDS.get(type(raw["id"])) or clipped(json.dumps(raw["id"]), 40)
        return _Refused(types.INVALID_REQUEST, f"the line is not a JSON-RPC 2.0 message: id must be a string or an "
                                               f"integer, not {kind}")
    return SessionMessage(message)


async def _read_stdin(stdin: io.BufferedIOBase, send: MemoryObjectSendStream[SessionMessage | Exception], most: int) -> None:
    """Send each line of ``stdin`` as a message or what is wrong with it, until stdin ends."""
    async with send:
        async for line in _lines(stdin, most):
            await send.send(_message(line, most))


@contextmanager
def claimed_stdin() -> Iterator[io.BufferedIOBase]:
    """The client's lines, read from a private copy of fd 0 while fd 0 itself points at the null
    device, so that nothing else this process runs, nor a child it starts, reads them (the SDK's
    reader claims fd 0 so too); fd 0 is pointed back on exit. A ``sys.stdin`` not backed by fd 0
    (replaced in-process) is read as it is."""
    try:
        backed = sys.stdin.buffer.fileno() == 0
    except (AttributeError, OSError, ValueError):
        backed = False
    if not backed:
        yield sys.stdin.buffer
        return
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        # never closed: a reader thread abandoned at shutdown may still block on it, and a closed number is reused
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


async def serve_stdio(server: Server[Any], settings: ServeSettings | None = None) -> None:
    """Serve ``server`` on this process's stdin and stdout until the client closes stdin. A line of
    stdin is read up to ``settings.max_body`` bytes, as an HTTP body is."""
    from mcp.server.stdio import stdio_server

    settings = settings or ServeSettings()
    # as many unanswered calls as the HTTP transport holds connections: every call at work, as many waiting, a few more
    most = settings.max_connections
    # the SDK's transport writes stdout (keeping stray prints off it); given an empty stdin, it reads nothing
    with claimed_stdin() as stdin:
        async with stdio_server(stdin=anyio.wrap_file(io.StringIO())) as (unread, write), anyio.create_task_group() as tg:
            await unread.aclose()
            send, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            tg.start_soon(_read_stdin, stdin, send, settings.max_body)
            answered = _AnsweredStdio(read, write, most)
            await server.run(answered, answered, server.create_initialization_options())


def http_app(server: Server[Any], settings: ServeSettings, host: str) -> Any:
    """``server`` as an ASGI app answering streamable HTTP at ``/mcp`` (bodies past
    ``settings.max_body`` refused; on loopback, only loopback Host and Origin headers accepted;
    with ``settings.token``, only requests that carry it as a bearer token)."""
    from engine.serve.auth import guard

    return guard(server.streamable_http_app(host=host, max_request_body_size=settings.max_body), settings.token)
