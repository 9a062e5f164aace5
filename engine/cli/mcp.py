"""``kgqa mcp --store URI``: the store's operations as Model Context Protocol tools
(:mod:`engine.serve.mcp`), read-only, over stdio (the default: an MCP client starts this command)
or streamable HTTP at ``http://HOST:PORT/mcp`` (loopback unless ``--host`` names another address)."""
from __future__ import annotations

import argparse

from engine.cli.common import add_store_arguments, open_from_args
from engine.cli.listening import add_listening_arguments, announce, listen_address, listening_settings
from engine.errors import KGQAError
from engine.serve.settings import ServeSettings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp", help="serve the store's operations as MCP tools for LLM agents, over stdio or streamable HTTP (/mcp)",
    )
    add_store_arguments(p)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default: the MCP client starts this command) or http (streamable HTTP at /mcp)")
    add_listening_arguments(p, port=8001, call="a tool call", calls="tool calls", busy="gets a tool error", http_only="with --transport http, ")
    p.set_defaults(handler=run_mcp)


def run_mcp(args: argparse.Namespace) -> None:
    try:
        import anyio

        from engine.serve.mcp import create_server, http_app, serve_stdio
    except ImportError as e:
        raise KGQAError(f"kgqa mcp needs the serve extra ({e}): pip install 'kgqa-engine[serve]'") from e
    settings = ServeSettings(**listening_settings(args))
    if args.transport == "stdio":
        with open_from_args(args) as store:
            anyio.run(serve_stdio, create_server(store, settings))  # stdout carries the protocol: nothing else may print there
        return
    from engine.serve.server import run

    host, port = listen_address(args)
    with open_from_args(args) as store:
        server = create_server(store, settings)
        announce("mcp", f"{store.uri} as MCP tools at http://{{host}}:{port}/mcp", host, settings.token)
        run(http_app(server, settings, host), host, port)
