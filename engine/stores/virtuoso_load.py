"""Loading a SPARQL endpoint store: Virtuoso's bulk loader through ``isql``, or ``INSERT DATA``
batches to an authenticated update endpoint (``loader="update"``).

The bulk loader writes the triples as Turtle files (N-Triples lines) into a staging directory
the server may read (``DirsAllowed`` in virtuoso.ini), then ``isql`` runs ``ld_dir`` +
``rdf_loader_run`` and the load list is checked for errors; what dead loads left in the load
list is cleared first (``engine/stores/staging.py``). Every isql call has a deadline. A bulk
load reports how many of its triples were new: bulk loads into one graph take turns on the
server (a lock file per graph in the staging directory), each counting the graph before and
after it, so two at once never both count the same triples. :class:`VirtuosoLoading` is a part
of :class:`engine.stores.sparql_endpoint.SparqlEndpointStore`, which holds its settings.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import itertools
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from engine.errors import InvalidInputError, StoreError, StoreUnavailableError
from engine.graph import XSD, Literal, Term
from engine.stores.endpoint_errors import retried
from engine.stores.staging import PREFIX, StagingFolder, abandoned_folders
from sparql.terms import Terms

_LOAD_MARK = "KGQA-LOAD:"
_COUNT_MARK = "KGQA-COUNT:"
_FILE_MARK = "KGQA-FILE:"
#: isql's options for every call: quiet, and no ``$ARGV[n]`` / ``$U{name}`` macros expanded inside
#: the statements (a path or graph IRI holding one would name another file or graph)
ISQL_OPTIONS = ("VERBOSE=OFF", "BANNER=OFF", "PROMPT=OFF", "MACRO_SUBSTITUTION=OFF")
_INTEGER = XSD + "integer"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SPECIAL_FLOAT_LINE = re.compile(
    rf'(?P<s><[^>]*>) (?P<p><[^>]*>) "(?P<value>INF|-INF|NaN)"\^\^<(?P<datatype>{re.escape(XSD)}(?:double|float))> \.\n'
)


class VirtuosoLoading:
    """The loading half of the endpoint store (its settings are the store's options)."""

    uri: str
    graph: str
    flavour: str
    terms: Terms
    endpoint: str
    timeout: float
    retries: int
    backoff: float
    user: str
    password: str
    isql: str
    isql_command: str
    staging_dir: str | None
    loaders: int
    chunk_size: int
    load_timeout: float
    loader: str
    update_endpoint: str
    batch_size: int

    def _quad_count(self) -> int:
        """The triples of the store's graph, counted in Virtuoso's quad table over isql.

        The graph's id comes from a subquery, not as a constant: Virtuoso's optimizer samples
        the rows of a constant graph when it compiles a query and keeps that estimate, so a
        count of a graph still empty (the one before a bulk load) left every later query on it
        planned for an empty graph, 20 to 300 times slower (MetaQA on Virtuoso 7.2)."""
        out = self._isql(
            f"SELECT '{_COUNT_MARK}' || cast(COUNT(*) AS VARCHAR) FROM DB.DBA.RDF_QUAD "
            f"WHERE G = (SELECT iri_to_id({_sql_string(self.graph)}));"
        )
        counts = _marked(out, _COUNT_MARK)
        if counts:
            return int(counts[0])
        raise StoreError(f"Virtuoso's SQL port gave no triple count for {self.uri}: {out[-300:]!r}")

    def _add_ntriples(self, lines: Iterable[str]) -> int | None:
        """Load the lines; through the bulk loader, return how many triples were new."""
        if self.loader == "update":
            self._insert_data(lines)
            return None
        return self._bulk_load(lines)

    def _object_text(self, obj: Term) -> str:
        """N-Triples, except that xsd:integer values within 64 bits are bare Turtle numbers,
        because Virtuoso's Turtle parser turns a quoted ``"2147483648"^^xsd:integer`` (anything
        beyond 32 bits) into an xsd:decimal. (The loader's fast lane never passes integers.)"""
        if isinstance(obj, Literal) and obj.datatype == _INTEGER and _INT64_MIN <= int(obj.value) <= _INT64_MAX:
            return obj.value
        return self.terms.term(obj)

    def _bulk_load(self, lines: Iterable[str]) -> int:
        """Load the lines through the bulk loader; how many triples were new. That is the
        graph's growth while this load holds its graph's lock (:meth:`_graph_lock`): loads into
        one graph through one staging directory take turns, so none counts another's triples."""
        if self.staging_dir is None:
            raise InvalidInputError(
                f"loading into {self.endpoint} needs staging_dir=: a directory this process can write and "
                "the Virtuoso server can read (listed in DirsAllowed of its virtuoso.ini)"
            )
        with StagingFolder(self.staging_dir) as folder:
            # Every file is written before the server reads any, so a bad triple stops the
            # load before anything reaches the store.
            count = self._stage(lines, folder.path)
            if not count:
                return 0
            with self._graph_lock():
                self._forget_dead_loads()
                before = self._quad_count()
                mine = f"starts_with(ll_file, {_sql_string(folder.path + '/')})"
                self._isql(f"ld_dir({_sql_string(folder.path)}, '*.ttl', {_sql_string(self.graph)});")
                deadline = self.load_timeout * -(-count // self.chunk_size)  # per staged file
                try:
                    with ThreadPoolExecutor(self.loaders) as pool:
                        list(pool.map(lambda _: self._isql("rdf_loader_run();", deadline, "the bulk load"), range(self.loaders)))
                    failures = self._wait_for_files(mine, deadline)
                    self._isql("checkpoint;", deadline, "the checkpoint after the bulk load")
                finally:  # the staged files go away, so their rows in the load list must too
                    self._isql(f"DELETE FROM DB.DBA.load_list WHERE {mine};")
                if failures:
                    raise StoreError(
                        f"Virtuoso's bulk loader failed on {self.uri}: {'; '.join(failures)} (triples of a failed "
                        "file up to the error may have been loaded; loading again is safe)"
                    )
                return self._quad_count() - before

    @contextlib.contextmanager
    def _graph_lock(self) -> Iterator[None]:
        """Held while a bulk load runs on the server: a lock file per graph in the staging
        directory (``flock``, which the system lets go when the process dies), waited for.
        Loads through another staging directory (another machine's) do not take turns with
        these, and their reports may then count each other's triples."""
        assert self.staging_dir is not None
        name = hashlib.sha256(self.graph.encode("utf-8")).hexdigest()[:16]
        path = os.path.join(self.staging_dir, f".kgqa-graph-{name}.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise StoreError(f"cannot write into the staging directory {self.staging_dir!r}: {e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # lets go of the lock

    def _wait_for_files(self, mine: str, deadline: float) -> list[str]:
        """Wait until the load list has loaded our files, and return those that failed. A
        loader session of another load on the server may have taken some of them: our own
        ``rdf_loader_run`` then returns while they are still being loaded."""
        query = (
            f"SELECT '{_LOAD_MARK}' || cast(ll_state AS VARCHAR) || ' ' || ll_file || ' ' || "
            f"coalesce(ll_error, 'was not loaded') FROM DB.DBA.load_list "
            f"WHERE {mine} AND (ll_state <> 2 OR ll_error IS NOT NULL);"
        )
        give_up = time.monotonic() + deadline
        while True:
            rows = [row.split(" ", 1) for row in _marked(self._isql(query), _LOAD_MARK)]
            if not any(state == "1" for state, _ in rows) or time.monotonic() > give_up:
                return [what for _, what in rows]
            time.sleep(0.2)

    def _forget_dead_loads(self) -> None:
        """Drop the load-list rows and staged files of loads from this staging directory whose
        process has died (:mod:`engine.stores.staging`): left there, they stay in the load list
        for ever and every ``rdf_loader_run`` on the server takes them up again."""
        assert self.staging_dir is not None
        prefix = _sql_string(os.path.join(os.path.abspath(self.staging_dir), PREFIX))
        listed = _marked(
            self._isql(f"SELECT DISTINCT '{_FILE_MARK}' || ll_file FROM DB.DBA.load_list WHERE starts_with(ll_file, {prefix});"),
            _FILE_MARK,
        )
        dead = abandoned_folders(self.staging_dir, listed)
        if dead:
            self._isql("\n".join(
                f"DELETE FROM DB.DBA.load_list WHERE starts_with(ll_file, {_sql_string(folder + '/')});" for folder in dead
            ))
            for folder in dead:
                shutil.rmtree(folder, ignore_errors=True)

    def _stage(self, lines: Iterable[str], folder: str) -> int:
        """Write the lines as Turtle files of ``chunk_size`` lines; return how many."""
        lines = iter(lines)
        count = part = 0
        try:
            while True:
                path = os.path.join(folder, f"part-{part:05d}.ttl")
                with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
                    for line in itertools.islice(lines, self.chunk_size):
                        out.write(line)
                        count += 1
                os.chmod(path, 0o644)
                if count < (part + 1) * self.chunk_size:  # the triples ran out
                    if count == part * self.chunk_size:
                        os.remove(path)
                    return count
                part += 1
        except UnicodeEncodeError as e:
            raise InvalidInputError(
                f"triple {count + 1} of the load is not valid Unicode ({e.reason}): {e.object[:200]!r}"
            ) from e
        except OSError as e:
            raise StoreError(f"cannot write the staging file in {folder!r}: {e}") from e

    def _isql(self, sql: str, timeout: float | None = None, what: str = "") -> str:
        """Run SQL statements through isql; raise on the first error it reports, and when it
        has not finished within ``timeout`` seconds (default: the store's ``timeout``):
        ``what`` names the work for that message (default: answering at all)."""
        if shutil.which(self.isql_command) is None:
            raise StoreUnavailableError(
                f"{self.isql_command} not found: Virtuoso's bulk loader needs it (apt-get install "
                "virtuoso-opensource-7-bin, or isql_command= its path); loader='update' loads without it"
            )
        limit = self.timeout if timeout is None else timeout
        try:
            done = subprocess.run(
                [self.isql_command, self.isql, self.user, self.password, *ISQL_OPTIONS],
                input=sql,
                capture_output=True,
                text=True,
                check=False,
                timeout=limit,
            )
        except subprocess.TimeoutExpired as e:
            if what:
                raise StoreError(
                    f"{what} on {self.uri} did not finish within {limit:g} s (load_timeout= seconds per staged "
                    "file): the server may be stopped, or still at work; check it, then load again (that is safe)"
                ) from e
            raise StoreUnavailableError(
                f"Virtuoso's SQL port {self.isql} did not answer within {limit:g} s (timeout=): is the server "
                "stopped or overloaded? Check it, or give isql='host:port' of a running server"
            ) from e
        except OSError as e:
            raise StoreUnavailableError(f"cannot run {self.isql_command}: {e}") from e
        output = done.stdout + done.stderr
        errors = [line for line in output.splitlines() if line.startswith("*** Error")]
        if errors:
            if "Connect failed" in errors[0] or "CL0" in errors[0]:
                raise StoreUnavailableError(
                    f"cannot connect to Virtuoso's SQL port {self.isql} as {self.user!r}: {errors[0]}. "
                    "Is the server running? Give isql='host:port' (its [Parameters] ServerPort) and the dba password."
                )
            raise StoreError(f"Virtuoso's bulk loader failed on {self.uri}: {' '.join(errors)} (SQL: {sql.strip()})")
        return output

    def _insert_data(self, lines: Iterable[str]) -> None:
        plain: list[str] = []  # every triple checked before any batch is sent
        special: list[re.Match] = []
        for line in lines:
            # Virtuoso's bulk loader keeps xsd:double / xsd:float INF, -INF and NaN as typed
            # strings, its SPARQL parser turns them into numbers: store them the loader's way
            match = _SPECIAL_FLOAT_LINE.fullmatch(line) if self.flavour == "virtuoso" else None
            if match:
                special.append(match)
            else:
                plain.append(line)
        opener = self._update_opener()
        updates = [
            f"INSERT DATA {{ GRAPH <{self.graph}> {{\n{''.join(plain[start:start + self.batch_size])}}} }}"
            for start in range(0, len(plain), self.batch_size)
        ] + [
            f"INSERT {{ GRAPH <{self.graph}> {{ {m['s']} {m['p']} ?o }} }} "
            f"WHERE {{ BIND(STRDT(\"{m['value']}\", <{m['datatype']}>) AS ?o) }}"
            for m in special
        ]
        for text in updates:
            data = urllib.parse.urlencode({"update": text}).encode()
            request = urllib.request.Request(self.update_endpoint, data=data, method="POST")
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
            try:
                retried(lambda: _post(opener, request, self.timeout), self.retries, self.backoff)
            except urllib.error.HTTPError as e:
                raise StoreError(
                    f"{self.update_endpoint} refused INSERT DATA (HTTP {e.code}): "
                    f"{e.read().decode(errors='replace')[:500]}; check user/password and update permissions"
                ) from e
            except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
                raise StoreUnavailableError(f"cannot reach the update endpoint {self.update_endpoint}: {e}") from e

    def _update_opener(self) -> urllib.request.OpenerDirector:
        # A private opener: SPARQLWrapper's digest support installs a process-wide one.
        passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        passwords.add_password(None, self.update_endpoint, self.user, self.password)
        return urllib.request.build_opener(
            urllib.request.HTTPDigestAuthHandler(passwords), urllib.request.HTTPBasicAuthHandler(passwords)
        )



def _post(opener: urllib.request.OpenerDirector, request: urllib.request.Request, timeout: float) -> None:
    with opener.open(request, timeout=timeout) as response:
        response.read()


def _marked(output: str, mark: str) -> list[str]:
    """The values of isql's output lines that a query tagged with ``mark``."""
    return [line[len(mark):].strip() for line in output.splitlines() if line.startswith(mark)]


def _sql_string(text: str) -> str:
    """``text`` as a Virtuoso SQL string literal, which reads a backslash as an escape (``\\'``
    would end the literal early)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
