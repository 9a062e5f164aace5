"""``kgqa serve --store URI``: the store's operations and the registered methods over HTTP
(:mod:`engine.serve`), read-only, on loopback unless ``--host`` names another address. Runs
until Ctrl-C or SIGTERM; the access log goes to stderr, one JSON object a line."""
from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli.common import add_device_arguments, add_store_arguments, open_from_args
from engine.cli.listening import DEFAULTS, add_listening_arguments, announce, listen_address, listening_settings
from engine.errors import InvalidInputError, KGQAError
from engine.methods import registry
from engine.serve.settings import ServeSettings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="serve the store's operations and the methods over HTTP: POST /v1/ops/<operation>, POST /v1/answer, "
        "docs at /docs",
    )
    add_store_arguments(p)
    add_listening_arguments(p, port=8000, call="an operation", calls="requests", busy="is answered 429",
                            token_scope="every request but /v1/health and the docs")
    p.add_argument("--cors", nargs="+", action="extend", default=[], metavar="ORIGIN",
                   help="origins a browser page may call the API from, e.g. http://localhost:5173 (default: none, CORS off)")
    p.add_argument("--answer-timeout", type=float, default=DEFAULTS.answer_timeout, metavar="S",
                   help=f"a /v1/answer request's deadline (default {DEFAULTS.answer_timeout:g} s)")
    p.add_argument("--max-questions", type=int, default=DEFAULTS.max_questions,
                   help=f"questions one /v1/answer request may ask (default {DEFAULTS.max_questions})")
    p.add_argument("--method-cache", type=int, default=DEFAULTS.method_cache,
                   help=f"methods kept built, one per method and config, each answering one request at a time "
                        f"(default {DEFAULTS.method_cache})")
    p.add_argument("--method-option", action="append", default=[], metavar="METHOD.OPTION=VALUE",
                   help="an option of a method's config that requests cannot set (models, files, templates), "
                   "repeatable, e.g. rog.model=models/rog")
    p.add_argument("--questions", default=None, metavar="FILE",
                   help="a question file the explorer page (/explorer) offers besides the datasets: RoG .jsonl/.parquet, "
                   "PathQuestion PQ-*.txt or MetaQA qa_*.txt")
    add_device_arguments(p)
    p.set_defaults(handler=run_serve)


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    return ServeSettings(
        **listening_settings(args), cors=tuple(args.cors), answer_timeout=args.answer_timeout,
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
        raise KGQAError(f"kgqa serve needs the serve extra ({e}): pip install '.[serve]' in the checkout (make setup does)") from e
    settings = settings_from_args(args)
    host, port = listen_address(args)
    with open_from_args(args) as store:
        app = create_app(store, settings)
        log_to_stderr()
        announce("serve", f"{store.uri} at http://{{host}}:{port} (API docs at /docs, question explorer at /explorer)",
                 host, settings.token)
        run(app, host, port, settings)
