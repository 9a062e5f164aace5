"""``kgqa server virtuoso|falkordb --dir D [--port P] [--host H] [--buffer-pool-gib G]
[--query-timeout S]``: a local throw-away server to try the engine on, listening on loopback
unless ``--host`` names another address. Prints the store URI on stdout (first line), how to
use it on stderr, and runs until Ctrl-C or SIGTERM, then stops the server and removes its
directory."""
from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidInputError, StoreUnavailableError
from engine.servers.base import FALKORDB_QUERY_TIMEOUT, LOOPBACK, exit_status


@dataclass
class Running:
    """A started server, as the command needs it."""

    uri: str
    process: subprocess.Popen
    log: Path
    stop: Callable[[], None]
    notes: list[str]


def _virtuoso(directory: Path, args: argparse.Namespace) -> Running:
    from engine.servers import virtuoso

    host = args.host
    server = virtuoso.start(directory, args.port, args.buffer_pool_gib, host)
    notes = [
        f"Virtuoso (pid {server.process.pid}) in {directory}: SPARQL at {server.endpoint}, isql at {server.isql} "
        + f"(user dba, password dba), both listening on {host}"
        + ("" if host == LOOPBACK else ": anyone who reaches that address can log in as dba"),
        f"load files with: kgqa load FILE --store {server.endpoint} --store-option isql={server.isql} "
        + f"--store-option staging_dir={server.staging}",
    ]
    return Running(server.endpoint, server.process, directory / "db" / "virtuoso.log", server.stop, notes)


def _falkordb(directory: Path, args: argparse.Namespace) -> Running:
    from engine.servers import falkordb

    host = args.host
    query_timeout = FALKORDB_QUERY_TIMEOUT if args.query_timeout is None else args.query_timeout or None  # 0: no limit
    instance = falkordb.start_instance(directory, args.port, host, query_timeout)
    notes = [
        f"FalkorDB (pid {instance.process.pid}) in {directory}: Bolt at {instance.uri}; it ignores database names "
        + f"(one graph). Its Redis port listens on {host}, but its Bolt listener binds every interface whatever "
        + "--host says and admits clients without a password, and it runs writes inside read transactions: "
        + "on a machine others can reach, firewall the Bolt port",
        f"load files with: kgqa load FILE --store {instance.uri}",
        f"it stops any query (a read or a load statement) after {query_timeout:g} s (--query-timeout)"
        if query_timeout
        else "it lets every query run to its end (--query-timeout 0), even one its client stopped waiting for",
    ]
    return Running(instance.uri, instance.process, instance.log, instance.stop, notes)


STARTERS: dict[str, Callable[[Path, argparse.Namespace], Running]] = {"virtuoso": _virtuoso, "falkordb": _falkordb}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "server", help="start a local throw-away Virtuoso or FalkorDB server, print its URI, stop it on Ctrl-C"
    )
    p.add_argument("kind", choices=sorted(STARTERS), help="which server: virtuoso (SPARQL) or falkordb (Bolt)")
    p.add_argument("--dir", required=True, type=Path,
                   help="a new or empty directory for the server's files (removed when it stops)")
    p.add_argument("--port", type=int, default=None,
                   help="Virtuoso: the HTTP (SPARQL) port; FalkorDB: the Bolt port, at most 32767 (default: a free one)")
    p.add_argument("--host", default=LOOPBACK,
                   help=f"the IPv4 address the server listens on (default {LOOPBACK}: this machine only; 0.0.0.0: every "
                   "interface). FalkorDB's Bolt listener binds every interface whatever this says")
    p.add_argument("--buffer-pool-gib", type=float, default=None, metavar="GIB",
                   help="Virtuoso: its buffer pool in GiB (default ≈ 0.8; more for a database much larger than that)")
    p.add_argument("--query-timeout", type=float, default=None, metavar="S",
                   help=f"FalkorDB: it stops any query that runs longer than S seconds (default {FALKORDB_QUERY_TIMEOUT:g}; 0: "
                   "never). It ignores the deadline a client sends, so this is what stops a query a client has stopped "
                   "waiting for; raise it with a store's timeout= for long load statements. Virtuoso stops each query at "
                   "the deadline the engine sends")
    p.set_defaults(handler=run_server)


#: the file a starting server claims its directory with
CLAIM = ".kgqa-server"


def _claim(directory: Path, given: Path) -> None:
    """Make ``directory`` this command's, or refuse it: it must be new or empty. The claim file
    is created exclusively, so of two commands starting on one directory at once only one gets
    it (the other, refused, removes nothing: a failed start removes the whole directory)."""
    not_empty = InvalidInputError(
        f"--dir {given}: not an empty directory; give a new or empty one (the server's files go there "
        "and are removed when it stops)"
    )
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise not_empty
    directory.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(directory / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        raise not_empty from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_server(args: argparse.Namespace) -> None:
    directory = args.dir.resolve()
    if args.buffer_pool_gib is not None and args.kind != "virtuoso":
        raise InvalidInputError(f"--buffer-pool-gib is Virtuoso's setting; {args.kind} has none")
    if args.query_timeout is not None:
        if args.kind != "falkordb":
            raise InvalidInputError(
                f"--query-timeout is FalkorDB's setting; {args.kind} stops each query at the deadline the engine sends"
            )
        if not (math.isfinite(args.query_timeout) and args.query_timeout >= 0):
            raise InvalidInputError(f"--query-timeout {args.query_timeout:g}: give a number of seconds, or 0 for no limit")
    _claim(directory, args.dir)
    # both set explicitly: a command started from a script's background job (`&`, nohup) inherits
    # an ignored SIGINT, and Ctrl-C / `kill -INT` would then never stop the server
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    running: Running | None = None
    try:
        running = STARTERS[args.kind](directory, args)
        print(running.uri, flush=True)
        for note in [*running.notes, "Ctrl-C (or SIGTERM) stops it and removes its directory."]:
            print(note, file=sys.stderr, flush=True)
        while (status := exit_status(running.process)) is None:
            time.sleep(0.2)
        tail = running.log.read_text(errors="replace")[-2000:] if running.log.exists() else "(no log)"
        raise StoreUnavailableError(
            f"{args.kind} exited by itself with status {status}; its log ends with:\n{tail}"
        )
    except KeyboardInterrupt:
        print(f"stopping {args.kind}", file=sys.stderr, flush=True)
    finally:
        for sig in previous:  # a second Ctrl-C must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        try:
            if running is not None:
                running.stop()
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
