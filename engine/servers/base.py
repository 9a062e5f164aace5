"""What a local throw-away database server offers: stores on it, and a clean stop.

Each server module (``virtuoso.py``, ``falkordb.py``) exposes ``start(workdir) -> Server``
that starts a real server on free loopback ports, or raises ``ServerUnavailable`` saying what
is missing (a binary, a package). The tests, the benchmarks and ``kgqa server`` start them.
A server binds :data:`LOOPBACK` unless its caller names another address (``--host``).
"""
from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO

from engine.errors import InvalidInputError, KGQAError
from engine.store import Store

#: where a throw-away server listens unless told otherwise: nobody else on the network reaches it
LOOPBACK = "127.0.0.1"
#: the address that stands for every interface
EVERY_INTERFACE = "0.0.0.0"
#: the longest a query runs on a FalkorDB server started here (its TIMEOUT_MAX), in seconds:
#: twice a Bolt store's default timeout, so the server stops what a client stopped waiting for
FALKORDB_QUERY_TIMEOUT = 60.0


class ServerUnavailable(KGQAError, RuntimeError):
    """The server cannot be started here; the message says what is missing."""


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_host(host: str) -> str:
    """``host`` when it is an IPv4 address this machine can listen on (``0.0.0.0``: every
    interface); else InvalidInputError."""
    try:
        ipaddress.IPv4Address(host)
    except ValueError as e:
        raise InvalidInputError(
            f"--host {host!r}: give an IPv4 address of this machine, e.g. {LOOPBACK} (the default) or {EVERY_INTERFACE} "
            "for every interface"
        ) from e
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError as e:
            raise InvalidInputError(
                f"--host {host}: cannot listen there ({e.strerror}); give an address of this machine, e.g. {LOOPBACK}"
            ) from e
    return host


def client_host(host: str) -> str:
    """The address a client on this machine reaches a server bound to ``host`` at (a server
    on every interface answers on loopback)."""
    return LOOPBACK if host == EVERY_INTERFACE else host


def check_port(port: int, host: str = LOOPBACK, highest: int = 65535) -> int:
    """``port`` when it can be bound on ``host`` ("" for every interface); else ServerUnavailable."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= highest:
        raise ServerUnavailable(f"invalid port {port!r}: use a number from 1 to {highest}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as a server binds: the connections a stopped server left in TIME_WAIT do not hold the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ServerUnavailable(f"port {port} cannot be used ({e.strerror}): choose another or let one be picked") from e
    return port


def spawn(command: list[str], cwd: Path | None = None, output: IO[bytes] | None = None) -> subprocess.Popen:
    """Start a server process in a session of its own: a Ctrl-C meant for its owner does not
    reach it, and :func:`stop_process` can end whatever it started."""
    return subprocess.Popen(
        command, cwd=cwd, stdout=output or subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )


def exit_status(process: subprocess.Popen) -> int | None:
    """The status a process from :func:`spawn` ended with (``-N``: killed by signal N), or None
    while it runs. It is left unreaped (a zombie), so its pid, which is also its group's id,
    names no other process until :func:`stop_process` reaps it."""
    if process.returncode is not None:
        return process.returncode
    try:
        ended = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped by another waiter of this Popen
        return process.poll()
    if ended is None:
        return None
    return ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """Terminate a process from :func:`spawn` (killed after ``timeout`` seconds), then any
    process it left in its group, then reap it. Once reaped (a second stop), it is left alone:
    its pid may belong to another program by now."""
    if process.returncode is not None:
        return
    if exit_status(process) is None:
        os.kill(process.pid, signal.SIGTERM)  # not Popen.terminate: that would reap it
        deadline = time.monotonic() + timeout
        while exit_status(process) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if exit_status(process) is None:
            os.kill(process.pid, signal.SIGKILL)
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    try:  # the group outlives its leader only while a child of it runs
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


class Server(ABC):
    @abstractmethod
    def new_store(self, name: str) -> Store:
        """A fresh, empty store on this server (its own graph / database named after ``name``)."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server and remove what it wrote."""
