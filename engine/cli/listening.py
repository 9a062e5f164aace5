"""What ``kgqa serve`` and ``kgqa mcp`` share: where they listen, the bearer token, and the limits
every call runs under (:class:`engine.serve.settings.ServeSettings`)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.identifiers import DEFAULT_LIMIT
from engine.servers.base import LOOPBACK, check_host, check_port
from engine.serve.settings import TOKEN_ENV, ServeSettings, token_or_env

DEFAULTS = ServeSettings()


def add_listening_arguments(p: argparse.ArgumentParser, *, port: int, call: str, calls: str, busy: str,
                            http_only: str = "", token_scope: str = "every request",
                            body: str = "the largest request body; a larger one is answered 413") -> None:
    """--host, --port, --token and the limits. ``call``/``calls`` name one unit of work ("an
    operation", "requests"), ``busy`` what a call beyond --max-concurrency gets, ``body`` what
    --max-body bounds; ``http_only`` prefixes the help of flags that apply over HTTP only."""
    p.add_argument("--host", default=LOOPBACK,
                   help=f"{http_only}the IPv4 address to listen on (default {LOOPBACK}: this machine only; 0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=port, help=f"{http_only}the port to listen on (default {port})")
    p.add_argument("--token", default=None,
                   help=f"{http_only}a bearer token {token_scope} must carry (default: ${TOKEN_ENV}, else none)")
    p.add_argument("--workers", type=int, default=DEFAULTS.workers,
                   help=f"threads running store operations (default {DEFAULTS.workers})")
    p.add_argument("--max-concurrency", type=int, default=DEFAULTS.max_concurrency,
                   help=f"{calls} at work at once; one more {busy} (default {DEFAULTS.max_concurrency})")
    p.add_argument("--max-body", type=int, default=DEFAULTS.max_body, metavar="BYTES",
                   help=f"{body} (default {DEFAULTS.max_body:,})")
    p.add_argument("--timeout", type=float, default=DEFAULTS.timeout, metavar="S",
                   help=f"{call}'s deadline, which the request may lower, never lift (default {DEFAULTS.timeout:g} s)")
    p.add_argument("--max-rows", type=int, default=DEFAULTS.max_rows, metavar="N",
                   help=f"the most rows {call} returns, which the request may lower, never lift (default {DEFAULT_LIMIT:,})")


def listening_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`ServeSettings` fields that :func:`add_listening_arguments`' flags set."""
    return {"timeout": args.timeout, "max_rows": args.max_rows, "max_body": args.max_body,
            "max_concurrency": args.max_concurrency, "workers": args.workers, "token": token_or_env(args.token)}


def listen_address(args: argparse.Namespace) -> tuple[str, int]:
    """The checked host and port."""
    host = check_host(args.host)
    return host, check_port(args.port, host)


def announce(command: str, where: str, host: str, token: str | None) -> None:
    """Say on stderr where ``command`` serves (``{host}`` in ``where`` is the address to browse), and warn when it
    listens beyond loopback with no token."""
    shown = "127.0.0.1" if host == "0.0.0.0" else host
    print(f"kgqa {command}: {where}; Ctrl-C stops it".replace("{host}", shown), file=sys.stderr, flush=True)
    if host != LOOPBACK and token is None:
        print(f"kgqa {command}: warning: listening on {host} without a token (give --token or ${TOKEN_ENV}): "
              "anyone who reaches it can query the store", file=sys.stderr, flush=True)
