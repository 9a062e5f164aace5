"""``kgqa mcp --store URI``: the store's operations as Model Context Protocol tools
(:mod:`engine.serve.mcp`), read-only, over stdio (the default: an MCP client starts this command)
or streamable HTTP at ``http://HOST:PORT/mcp`` (loopback unless ``--host`` names another address)."""
from __future__ import annotations

import argparse

from engine.cli.common import add_store_arguments, open_from_args
from engine.cli.listening import add_listening_arguments, announce, listen_address, listening_settings
from engine.errors import InvalidInputError, KGQAError
from engine.servers.base import LOOPBACK
from engine.serve.settings import ServeSettings

#: the port ``kgqa mcp --transport http`` listens on by default
PORT = 8001


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp", help="serve the store's operations as MCP tools for LLM agents, over stdio or streamable HTTP (/mcp)",
    )
    add_store_arguments(p)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default: the MCP client starts this command) or http (streamable HTTP at /mcp)")
    add_listening_arguments(p, port=PORT, call="a tool call", calls="tool calls", busy="gets a tool error", http_only="with --transport http, ",
                            body="the longest line over stdio and the largest request body over HTTP; a longer one is refused")
    p.set_defaults(handler=run_mcp)


def _refuse_http_flags(args: argparse.Namespace) -> None:
    """Over stdio nothing listens: a flag of the HTTP transport given with it is a mistake, not a no-op."""
    given = [flag for flag, value, default in (("--host", args.host, LOOPBACK), ("--port", args.port, PORT),
                                               ("--token", args.token, None))
             if value != default]
    if given:
        verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
        raise InvalidInputError(f"{', '.join(given)} {verb} with --transport http only (over stdio the MCP client "
                                "starts this command and talks to it through its stdin and stdout): add --transport http "
                                f"or leave {them} out")


def run_mcp(args: argparse.Namespace) -> None:
    try:
        import anyio

        from engine.serve.mcp import create_server, http_app, serve_stdio
    except ImportError as e:
        raise KGQAError(f"kgqa mcp needs the serve extra ({e}): pip install '.[serve]' in the checkout (make setup does)") from e
    settings = ServeSettings(**listening_settings(args))
    if args.transport == "stdio":
        _refuse_http_flags(args)
        with open_from_args(args) as store:
            anyio.run(serve_stdio, create_server(store, settings), settings)  # stdout carries the protocol: nothing else may print there
        return
    from engine.serve.server import run

    host, port = listen_address(args)
    with open_from_args(args) as store:
        server = create_server(store, settings)
        announce("mcp", f"{store.uri} as MCP tools at http://{{host}}:{port}/mcp", host, settings.token)
        run(http_app(server, settings, host), host, port, settings)
