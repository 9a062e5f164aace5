"""``kgqa mcp --store URI``: the store's operations as Model Context Protocol tools
(:mod:`engine.serve.mcp`), read-only, over stdio (the default: an MCP client starts this command)
or streamable HTTP at ``http://HOST:PORT/mcp`` (loopback unless ``--host`` names another address)."""
from __future__ import annotations

import argparse
import sys

from engine.cli.common import add_store_arguments, open_from_args
from engine.errors import KGQAError
from engine.identifiers import DEFAULT_LIMIT
from engine.servers.base import LOOPBACK, check_host, check_port
from engine.serve.settings import TOKEN_ENV, ServeSettings, token_or_env

DEFAULTS = ServeSettings()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp", help="serve the store's operations as MCP tools for LLM agents, over stdio or streamable HTTP (/mcp)",
    )
    add_store_arguments(p)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default: the MCP client starts this command) or http (streamable HTTP at /mcp)")
    p.add_argument("--host", default=LOOPBACK,
                   help=f"with --transport http, the IPv4 address to listen on (default {LOOPBACK}: this machine only)")
    p.add_argument("--port", type=int, default=8001, help="with --transport http, the port to listen on (default 8001)")
    p.add_argument("--token", default=None,
                   help=f"with --transport http, a bearer token every request must carry (default: ${TOKEN_ENV}, else none)")
    p.add_argument("--timeout", type=float, default=DEFAULTS.timeout, metavar="S",
                   help=f"a tool call's deadline, which a call may lower, never lift (default {DEFAULTS.timeout:g} s)")
    p.add_argument("--max-rows", type=int, default=DEFAULTS.max_rows, metavar="N",
                   help=f"the most rows a tool call returns, which a call may lower, never lift (default {DEFAULT_LIMIT:,})")
    p.add_argument("--workers", type=int, default=DEFAULTS.workers,
                   help=f"threads running store work (default {DEFAULTS.workers})")
    p.add_argument("--max-concurrency", type=int, default=DEFAULTS.max_concurrency,
                   help=f"tool calls at work at once; one more is refused (default {DEFAULTS.max_concurrency})")
    p.add_argument("--max-body", type=int, default=DEFAULTS.max_body, metavar="BYTES",
                   help=f"with --transport http, the largest request body (default {DEFAULTS.max_body:,})")
    p.set_defaults(handler=run_mcp)


def run_mcp(args: argparse.Namespace) -> None:
    try:
        import anyio

        from engine.serve.mcp import create_server, http_app, serve_stdio
    except ImportError as e:
        raise KGQAError(f"kgqa mcp needs the serve extra ({e}): pip install 'kgqa-engine[serve]'") from e
    token = token_or_env(args.token)
    settings = ServeSettings(timeout=args.timeout, max_rows=args.max_rows, workers=args.workers,
                             max_concurrency=args.max_concurrency, max_body=args.max_body, token=token)
    if args.transport == "stdio":
        with open_from_args(args) as store:
            anyio.run(serve_stdio, create_server(store, settings))  # stdout carries the protocol: nothing else may print there
        return
    from engine.serve.server import run

    host = check_host(args.host)
    port = check_port(args.port, host)
    with open_from_args(args) as store:
        server = create_server(store, settings)
        shown = "127.0.0.1" if host == "0.0.0.0" else host
        print(f"kgqa mcp: {store.uri} as MCP tools at http://{shown}:{port}/mcp; Ctrl-C stops it", file=sys.stderr, flush=True)
        if host != LOOPBACK and token is None:
            print(f"kgqa mcp: warning: listening on {host} without a token (--token): anyone who reaches it can query the store",
                  file=sys.stderr, flush=True)
        run(http_app(server, settings, host), host, port)
