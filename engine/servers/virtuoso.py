"""A throw-away Virtuoso 7 server: its own virtuoso.ini, database and staging directory in
``workdir``, SQL (isql) and HTTP (/sparql) on loopback ports (free ones unless named; another
address when the caller names one)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from engine.errors import InvalidInputError
from engine.servers.base import (
    EVERY_INTERFACE,
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
from engine.stores.sparql_endpoint import SparqlEndpointStore

BINARY = "virtuoso-t"
ISQL = "isql-vt"
STARTUP_TIMEOUT = 60.0

#: The buffer pool by default: 100,000 pages of 8 KiB (≈ 0.8 GiB), sized for a small machine (2
#: cores, 24 GiB) running tests beside it; ``buffer_pool_gib`` gives a database much larger than
#: that (a Freebase-sized one) more, as Virtuoso's own guidance does. Loading the 50M-triple generated
#: graph (a 1.9 GB database) took as long with 4 GiB: there the load batch decides
#: (docs/design/virtuoso-load-batches.md). No MaxQueryExecutionTime / ResultSetMaxRows in the ini: Virtuoso would cut results
#: short instead of failing.
DEFAULT_BUFFERS = 100_000
PAGE_BYTES = 8192
INI = """\
[Database]
DatabaseFile = {db}/virtuoso.db
ErrorLogFile = {db}/virtuoso.log
LockFile = {db}/virtuoso.lck
TransactionFile = {db}/virtuoso.trx
xa_persistent_file = {db}/virtuoso.pxa
ErrorLogLevel = 7
FileExtend = 200
MaxCheckpointRemap = 2000
Striping = 0
TempStorage = TempDatabase

[TempDatabase]
DatabaseFile = {db}/virtuoso-temp.db
TransactionFile = {db}/virtuoso-temp.trx
MaxCheckpointRemap = 2000
Striping = 0

[Parameters]
ServerPort = {sql_listen}
DisableUnixSocket = 1
MaxClientConnections = 20
CheckpointInterval = 0
O_DIRECT = 0
CaseMode = 2
MaxStaticCursorRows = 5000
AllowOSCalls = 0
DirsAllowed = {staging}
ThreadThreshold = 10
NumberOfBuffers = {buffers}
MaxDirtyBuffers = {dirty_buffers}
MaxMemPoolSize = 200000000

[HTTPServer]
ServerPort = {http_listen}
ServerRoot = {db}/www
MaxClientConnections = 10
EnabledDavVSP = 0
HTTPProxyEnabled = 0
MaxKeepAlives = 10
KeepAliveTimeout = 10
Charset = UTF-8

"""


class VirtuosoServer(Server):
    def __init__(
        self, workdir: Path, process: subprocess.Popen, sql_port: int, http_port: int, host: str = LOOPBACK
    ) -> None:
        self.workdir = workdir
        self.process = process
        self.sql_port = sql_port
        self.http_port = http_port
        self.host = host  # where both ports listen
        self.staging = workdir / "staging"

    @property
    def endpoint(self) -> str:
        return f"http://{client_host(self.host)}:{self.http_port}/sparql"

    @property
    def isql(self) -> str:
        """``host:port`` of the SQL (isql) listener."""
        return f"{client_host(self.host)}:{self.sql_port}"

    def new_store(self, name: str, **options) -> SparqlEndpointStore:
        options = {
            "graph": f"http://kgqa-engine/test/{name}",
            "isql": self.isql,
            "staging_dir": str(self.staging),
            **options,
        }
        return SparqlEndpointStore(self.endpoint, **options)

    def buffers(self) -> int:
        """The buffer pool's size in pages, as the running server reports it (isql ``status()``)."""
        report = subprocess.run(
            [ISQL, self.isql, "dba", "dba", "exec=status();"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout
        found = re.search(r"^\s*(\d+) buffers,", report, re.MULTILINE)
        if found is None:
            raise ServerUnavailable(f"Virtuoso's status() named no buffer pool; it said:\n{report[-500:]}")
        return int(found.group(1))

    def stop(self) -> None:
        stop_process(self.process, timeout=30)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint + "?query=ASK%7B%7D", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def buffers_for(buffer_pool_gib: float | None) -> int:
    """Virtuoso's ``NumberOfBuffers`` for a buffer pool of that many GiB (None: the default)."""
    if buffer_pool_gib is None:
        return DEFAULT_BUFFERS
    if not 0.1 <= buffer_pool_gib <= 1024:
        raise InvalidInputError(
            f"a Virtuoso buffer pool of {buffer_pool_gib:g} GiB: give 0.1 to 1024 GiB (more than the default 0.8 "
            "for a database much larger than that)"
        )
    memory = _machine_memory()
    if memory is not None and buffer_pool_gib * 2**30 > memory:
        raise InvalidInputError(
            f"a Virtuoso buffer pool of {buffer_pool_gib:g} GiB is more than this machine's memory "
            f"({memory / 2**30:.1f} GiB): give at most about two thirds of it"
        )
    return int(buffer_pool_gib * 2**30 / PAGE_BYTES)


def _machine_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None


def start(
    workdir: Path, http_port: int | None = None, buffer_pool_gib: float | None = None, host: str = LOOPBACK
) -> VirtuosoServer:
    """Start ``virtuoso-t`` in the foreground with both ports on ``host`` (loopback unless
    named; HTTP on ``http_port`` when given, else free ports), with a buffer pool of
    ``buffer_pool_gib`` (default ≈ 0.8 GiB); wait until /sparql answers.

    A server that exits at once is started again on other ports (another process may have
    taken a port between our choosing it and Virtuoso binding it)."""
    buffers = buffers_for(buffer_pool_gib)
    host = check_host(host)
    binary = shutil.which(BINARY)
    if binary is None or shutil.which(ISQL) is None:
        raise ServerUnavailable(
            f"{BINARY} not found: run `make virtuoso` (apt-get install virtuoso-opensource-7-bin)"
        )
    workdir = Path(workdir).resolve()
    if http_port is not None:  # 0 too: a port is named or not
        check_port(http_port, host)
    for _ in range(3 if http_port is None else 1):
        server, exited, tail = _launch(binary, workdir, host, http_port, buffers)
        if server is not None:
            return server
        if exited is None:
            break
    reason = f"exited with status {exited}" if exited is not None else f"did not answer within {STARTUP_TIMEOUT:.0f} s"
    raise ServerUnavailable(f"virtuoso-t {reason}; its log ends:\n{tail}")


def _launch(
    binary: str, workdir: Path, host: str, http_port: int | None, buffers: int
) -> tuple[VirtuosoServer | None, int | None, str]:
    """One start: the server, or None with its exit status (None: still silent) and log tail."""
    db = workdir / "db"
    staging = workdir / "staging"
    for folder in (db / "www", staging):
        folder.mkdir(parents=True, exist_ok=True)
    sql_port, http_port = free_port(host), http_port or free_port(host)
    while http_port == sql_port:
        sql_port = free_port(host)
    ini = workdir / "virtuoso.ini"
    ini.write_text(INI.format(
        db=db, staging=staging, sql_listen=_listen(host, sql_port), http_listen=_listen(host, http_port),
        buffers=buffers, dirty_buffers=buffers * 3 // 5,
    ))
    with open(workdir / "stdout.log", "wb") as out:
        process = spawn([binary, "-f", "-c", str(ini)], cwd=db, output=out)
    server = VirtuosoServer(workdir, process, sql_port, http_port, host)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    try:
        while time.monotonic() < deadline and exit_status(process) is None:
            if _answers(server.endpoint):
                return server, None, ""
            time.sleep(0.25)
    except BaseException:  # interrupted while waiting: no server is left behind
        server.stop()
        raise
    exited = exit_status(process)
    tail = "\n".join(_tail(db / "virtuoso.log") + _tail(workdir / "stdout.log"))
    server.stop()
    return None, exited, f"(ports {sql_port}, {http_port})\n{tail}"


def _listen(host: str, port: int) -> str:
    """A ``ServerPort`` value: ``host:port``, or the bare port for every interface (told
    ``0.0.0.0:port``, Virtuoso's HTTP server answers 404 for /sparql)."""
    return str(port) if host == EVERY_INTERFACE else f"{host}:{port}"


def _tail(path: Path, lines: int = 20) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []
