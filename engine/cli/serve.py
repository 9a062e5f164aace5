"""``kgqa serve --store URI``: the store's operations and the registered methods over HTTP
(:mod:`engine.serve`), read-only, on loopback unless ``--host`` names another address. Runs
until Ctrl-C or SIGTERM; the access log goes to stderr, one JSON object a line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli.common import add_device_arguments, add_store_arguments, open_from_args
from engine.errors import InvalidInputError, KGQAError
from engine.identifiers import DEFAULT_LIMIT
from engine.methods import registry
from engine.servers.base import LOOPBACK, check_host, check_port
from engine.serve.settings import TOKEN_ENV, ServeSettings, token_or_env

DEFAULTS = ServeSettings()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="serve the store's operations and the methods over HTTP: POST /v1/ops/<operation>, POST /v1/answer, "
        "docs at /docs",
    )
    add_store_arguments(p)
    p.add_argument("--host", default=LOOPBACK,
                   help=f"the IPv4 address to listen on (default {LOOPBACK}: this machine only; 0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="the port to listen on (default 8000)")
    p.add_argument("--token", default=None,
                   help=f"a bearer token every request but /v1/health must carry (default: ${TOKEN_ENV}, else none)")
    p.add_argument("--cors", nargs="+", action="extend", default=[], metavar="ORIGIN",
                   help="origins a browser page may call the API from, e.g. http://localhost:5173 (default: none, CORS off)")
    p.add_argument("--workers", type=int, default=DEFAULTS.workers,
                   help=f"threads running store and model work (default {DEFAULTS.workers})")
    p.add_argument("--max-concurrency", type=int, default=DEFAULTS.max_concurrency,
                   help=f"requests at work at once; one more is answered 429 (default {DEFAULTS.max_concurrency})")
    p.add_argument("--max-body", type=int, default=DEFAULTS.max_body, metavar="BYTES",
                   help=f"the largest request body; a larger one is answered 413 (default {DEFAULTS.max_body:,})")
    p.add_argument("--timeout", type=float, default=DEFAULTS.timeout, metavar="S",
                   help=f"an operation's deadline, which a request may lower, never lift (default {DEFAULTS.timeout:g} s)")
    p.add_argument("--max-rows", type=int, default=DEFAULTS.max_rows, metavar="N",
                   help=f"the most rows an operation returns, which a request may lower, never lift (default {DEFAULT_LIMIT:,})")
    p.add_argument("--answer-timeout", type=float, default=DEFAULTS.answer_timeout, metavar="S",
                   help=f"a /v1/answer request's deadline (default {DEFAULTS.answer_timeout:g} s)")
    p.add_argument("--max-questions", type=int, default=DEFAULTS.max_questions,
                   help=f"questions one /v1/answer request may ask (default {DEFAULTS.max_questions})")
    p.add_argument("--method-cache", type=int, default=DEFAULTS.method_cache,
                   help=f"methods kept built, one per method and config (default {DEFAULTS.method_cache})")
    p.add_argument("--method-option", action="append", default=[], metavar="METHOD.OPTION=VALUE",
                   help="an option of a method's config that requests cannot set (models, files, templates), "
                   "repeatable, e.g. rog.model=models/rog")
    p.add_argument("--questions", default=None, metavar="FILE",
                   help="a question file the explorer page (/explorer) offers besides the datasets: RoG .jsonl/.parquet, "
                   "PathQuestion PQ-*.txt or MetaQA qa_*.txt")
    add_device_arguments(p)
    p.set_defaults(handler=run_serve)


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    token = token_or_env(args.token)
    return ServeSettings(
        timeout=args.timeout, max_rows=args.max_rows, max_body=args.max_body, max_concurrency=args.max_concurrency,
        workers=args.workers, token=token, cors=tuple(args.cors), answer_timeout=args.answer_timeout,
        max_questions=args.max_questions, method_cache=args.method_cache,
        method_options=registry.parse_method_options(args.method_option), device=args.device, dtype=args.dtype,
        questions=questions_file(args.questions),
    )


def questions_file(path: str | None) -> str | None:
    """The explorer's question file, read now so that a bad one fails at start, not per request."""
    if path is None:
        return None
    from loaders.datasets import load_dataset

    if not Path(path).is_file():
        raise InvalidInputError(f"--questions {path}: no such file (the datasets themselves are offered without it)")
    load_dataset(path)
    return str(Path(path).resolve())


def run_serve(args: argparse.Namespace) -> None:
    try:
        from engine.serve.access_log import log_to_stderr
        from engine.serve.app import create_app
        from engine.serve.server import run
    except ImportError as e:
        raise KGQAError(f"kgqa serve needs the serve extra ({e}): pip install 'kgqa-engine[serve]'") from e
    settings = settings_from_args(args)
    host = check_host(args.host)
    port = check_port(args.port, host)
    with open_from_args(args) as store:
        app = create_app(store, settings)
        log_to_stderr()
        shown = "127.0.0.1" if host == "0.0.0.0" else host
        print(f"kgqa serve: {store.uri} at http://{shown}:{port} (API docs at /docs, question explorer at /explorer); "
              "Ctrl-C stops it", file=sys.stderr, flush=True)
        if host != LOOPBACK and settings.token is None:
            print(f"kgqa serve: warning: listening on {host} without a token: anyone who reaches it can query the store "
                  f"(give --token or ${TOKEN_ENV})", file=sys.stderr, flush=True)
        run(app, host, port)
