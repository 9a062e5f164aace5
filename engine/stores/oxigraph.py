"""The embedded store: Oxigraph through pyoxigraph, on disk or in memory."""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from engine.errors import InvalidInputError, QueryTimeoutError, StoreError, StoreUnavailableError
from engine.graph import FREEBASE_NS
from engine.ops import Compiled, Execute, Op
from engine.results import QueryResult
from engine.stores import oxigraph_child as child
from engine.stores.oxigraph_processes import QueryProcesses
from engine.stores.sparql_store import Columns, SparqlStore
from engine.stores.store_lock import LOCK_NAME, StoreLock, held_by, lock_holders
from engine.timeouts import Abandoned, abandoned, run_with_timeout
from sparql.compiler import SparqlCompiler
from sparql.readonly import prepare_query


def is_oxigraph_store(path: str) -> bool:
    """Whether ``path`` holds an Oxigraph (RocksDB) database: its ``CURRENT`` file and a
    ``MANIFEST-*`` file, which every RocksDB database has (a folder of one's own may well hold
    a file named CURRENT)."""
    if not os.path.isfile(os.path.join(path, "CURRENT")):  # before listing: a big folder is listed only when it may be one
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(name.startswith("MANIFEST-") for name in names)


def store_holding(path: str | os.PathLike[str]) -> str | None:
    """The Oxigraph store folder that ``path`` (there or not yet) lies inside, if any."""
    resolved = os.path.realpath(path)
    for folder in Path(resolved).parents:
        if is_oxigraph_store(str(folder)):
            return str(folder)
    return None


def damaged_store_error(path: str, said: str) -> StoreUnavailableError:
    """The error for a store whose files RocksDB found damaged, at open or when a query read
    the damaged block; ``said`` is RocksDB's "Corruption: …"."""
    return StoreUnavailableError(
        f"the store at {os.path.abspath(path)} is damaged: {said.rstrip('. ')}; "
        "restore it from a backup or load it again into a new folder"
    )


def refuse_foreign_folder(path: str) -> None:
    """Refuse to make a new store in a folder that holds anything (but the engine's lock file):
    RocksDB would write its files among the folder's own and take a file named CURRENT or LOG
    there for its own."""
    try:
        names = set(os.listdir(path)) - {LOCK_NAME}
    except (FileNotFoundError, NotADirectoryError):
        return  # made, or refused as a file, as the store folder is created
    except OSError as e:
        raise StoreUnavailableError(f"cannot read the store folder {os.path.abspath(path)}: {e.strerror}; give another --store") from e
    if names:
        raise InvalidInputError(
            f"{os.path.abspath(path)} is neither a kgqa store nor empty (it holds {', '.join(sorted(names)[:3])}"
            f"{', …' if len(names) > 3 else ''}): give a new or empty folder as the store"
        )


class OxigraphStore(SparqlStore):
    """Oxigraph, embedded: ``OxigraphStore(path)`` on disk, ``OxigraphStore(None)`` in memory.

    ``create=False`` opens only a store that exists (reading a misspelled path must not answer
    from a new, empty store); ``created`` says whether this call made a new one.

    ``read_only=True`` opens a store that exists for reading only. Any number of processes may
    read one store at once; a process that opens it for writing holds it alone
    (:mod:`engine.stores.store_lock`): while it does, others can neither read nor write it, and
    while anyone reads it, no one can write it. So a reader sees what was stored before it opened
    the store, and nothing changes under it until it closes the store.

    A raw query or an S-expression with a timeout, on a store opened read only, runs in a process
    of its own that is killed at the deadline (:mod:`engine.stores.oxigraph_processes`). Every
    other call with a timeout runs in a thread that the caller stops waiting for at the deadline
    (:mod:`engine.timeouts`): the engine's other operations are bounded by their limits. Each such
    process may allocate at most ``query_memory_gib`` GiB (by default half the machine's memory
    shared among the processes, at least 1 GiB; 0 for no bound): a query that needs more fails with
    a QueryMemoryError.

    Leaving a ``with`` block on an exception removes a store that this call created and that
    still holds nothing (the folders it made, or the files it made in an empty folder that was
    there). A new store is made only in a new or empty folder (:func:`refuse_foreign_folder`).
    """

    def __init__(
        self,
        path: str | None,
        namespace: str = FREEBASE_NS,
        *,
        create: bool = True,
        read_only: bool = False,
        query_memory_gib: float | None = None,
    ) -> None:
        super().__init__(SparqlCompiler(namespace))
        memory = None if query_memory_gib is None else _memory_bytes(query_memory_gib)
        self.path = path
        self.uri = f"oxigraph:{path}" if path else "memory:"
        self.read_only = read_only and path is not None
        self.created = path is None or not is_oxigraph_store(path)
        self._made: _Made | None = None
        self._lock: StoreLock | None = None
        self._processes: QueryProcesses | None = None
        if path is None:
            self.db = ox.Store()
            return
        if self.created and (self.read_only or not create):
            what = "is not an Oxigraph store" if os.path.exists(path) else "does not exist"
            raise StoreUnavailableError(
                f"no store at {os.path.abspath(path)}: that path {what}. Give the store's path (--store PATH, "
                f"or $KGQA_STORE), or load data into a new one: kgqa load FILE --store {path}"
            )
        if self.created:
            refuse_foreign_folder(path)
        made = _Made(path) if self.created else None
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise StoreUnavailableError(f"cannot create the store folder {os.path.abspath(path)}: {e.strerror}; give another --store") from e
        self._lock = StoreLock(path, exclusive=not self.read_only)
        try:
            self.db = self._open_db(path)
        except BaseException:
            if made is not None:
                made.remove()
            self._lock.release()
            raise
        self._made = made
        if self.read_only:
            self._processes = QueryProcesses(path, memory=memory)

    def _open_db(self, path: str) -> ox.Store:
        rocksdb_lock = os.path.join(path, "LOCK")
        if self.read_only and lock_holders(rocksdb_lock):  # a writer that is not the engine's
            raise StoreUnavailableError(
                f"the store at {os.path.abspath(path)} is open for writing in {held_by(rocksdb_lock)}; "
                "wait until it closes the store, then run this again"
            )
        try:
            return ox.Store.read_only(path) if self.read_only else ox.Store(path)
        except RuntimeError as e:  # how pyoxigraph reports RocksDB's "Corruption: …", among others
            if child.is_damage(e):
                raise damaged_store_error(path, str(e)) from e
            raise StoreUnavailableError(
                f"the store at {os.path.abspath(path)} cannot be opened: {str(e).rstrip('. ')}; "
                "restore it from a backup or load it again into a new folder"
            ) from e
        except OSError as e:
            held = "lock" in str(e).lower()
            raise StoreUnavailableError(
                f"cannot open the Oxigraph store at {os.path.abspath(path)}: {e}. "
                + (f"It is open for writing in {held_by(rocksdb_lock)}: close it there first." if held else "Give another directory.")
            ) from e

    def close(self) -> None:
        if self._processes is not None:  # before the lock goes: they read the store too
            self._processes.close()
        db = self.__dict__.pop("db", None)
        if db is not None and self.path is not None and not self.read_only:
            db.flush()
        del db  # the database closes before its lock is let go
        if self._lock is not None:
            self._lock.release()

    def __getattr__(self, name: str) -> Any:
        # called only for what the instance lacks: the database, once close() has let it go
        if name == "db":
            raise StoreError(f"the store {self.uri} is closed: open it again (open_store) to use it")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None or self._made is None or "db" not in self.__dict__ or len(self.db):
            self.close()
            return
        # a new store that a failed load left empty: removed while still locked, so that no other
        # process opens it in between
        del self.db
        self._made.remove()
        self.close()

    # ------------------------------------------------------------------ writing
    def _add_ntriples(self, lines: Iterable[str]) -> None:
        if self.read_only:
            raise StoreError(f"{self.uri} is open read only: open it with read_only=False (as kgqa load does) to load into it")
        try:
            data = "".join(lines).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInputError(f"a triple to load is not valid Unicode ({e.reason}): {e.object[max(0, e.start - 80):e.end + 80]!r}") from e
        try:
            # The bulk loader: no transaction, parses and writes in Rust without holding the GIL.
            self.db.bulk_load(input=data, format=ox.RdfFormat.N_TRIPLES)
        except (OSError, SyntaxError, ValueError) as e:
            raise StoreError(f"bulk load into {self.uri} failed: {e}") from e

    def count_triples(self) -> int:
        with self._damage_named():
            return len(self.db)

    @contextlib.contextmanager
    def _damage_named(self) -> Iterator[None]:
        """RocksDB's report of a damaged block, which it makes only when a query reads that block,
        raised as opening a damaged store raises it; any other error as it is."""
        try:
            yield
        except RuntimeError as e:
            if not child.is_damage(e) or self.path is None:
                raise
            raise damaged_store_error(self.path, str(e)) from e

    # ------------------------------------------------------------------ reading
    def _select(self, text: str, timeout: float | None = None) -> Columns:
        # pyoxigraph cannot cancel a query: past the timeout it is abandoned (engine.timeouts)
        return run_with_timeout(lambda: self._solutions(text), timeout, "Oxigraph")

    def _solutions(self, text: str) -> Columns:
        # The answer comes out as TSV, written in Rust: reading it is a fraction of the cost of
        # walking pyoxigraph's solution objects in Python (sparql/tsv.py).
        try:
            with self._damage_named():
                solutions = self.db.query(text, use_default_graph_as_union=False)
                data = solutions.serialize(format=ox.QueryResultsFormat.TSV)
        except SyntaxError as e:  # a compiler bug, never user input
            raise StoreError(f"Oxigraph rejected a generated query: {e}\n{text}") from e
        return self._read_tsv(data.decode("utf-8"))

    def _query(
        self, text: str, params: dict[str, Any], allow_service: bool, timeout: float | None, limit: int | None
    ) -> QueryResult:
        text = prepare_query(text, params, self.terms.parameter, allow_service=allow_service)
        if timeout is not None and self._processes is not None:
            return self._answer_in_child(text, timeout, limit)
        try:
            return run_with_timeout(lambda: self._answer(text, limit), timeout, "Oxigraph")
        except QueryTimeoutError as e:
            if timeout is None:
                raise
            raise QueryTimeoutError(
                f"the query timed out after {timeout:g} s (its timeout) on {self.uri}. Oxigraph cannot cancel a "
                "running query in a store open for writing or in memory: the abandoned one ends at its next row, "
                "but one still computing its first (an aggregate, ORDER BY, ASK) runs on in the background until "
                "that row is ready. Give a larger timeout or a narrower query, or open the store read only, "
                "where a query is stopped at its deadline"
            ) from e

    def _answer_in_child(self, text: str, timeout: float, limit: int | None) -> QueryResult:
        try:
            kind, data = self._ask_child(text, timeout, compiled=False, rows=limit)
        except QueryTimeoutError as e:
            raise QueryTimeoutError(f"the query timed out after {timeout:g} s (its timeout) on {self.uri}: {e}") from e
        if kind == child.BAD_QUERY:
            raise InvalidInputError(f"invalid SPARQL query: {data.decode()}")
        if kind == child.SOLUTIONS:
            return self._result(ox.parse_query_results(data, format=ox.QueryResultsFormat.JSON))
        if kind == child.SOME_SOLUTIONS:
            return self._result(ox.parse_query_results(data, format=ox.QueryResultsFormat.TSV))
        return self._result(ox.parse(data, format=ox.RdfFormat.N_TRIPLES))

    def _execute(self, op: Op, compiled: Compiled) -> Columns:
        if not isinstance(op, Execute) or op.timeout is None or self._processes is None:
            return super()._execute(op, compiled)
        # an S-expression's shape comes from outside the engine (a model's output, a user's), so
        # like a raw query it runs where it can be stopped at its deadline
        text = self.terms.bind(compiled)
        kind, data = self._ask_child(text, op.timeout, compiled=True)
        if kind == child.BAD_QUERY:  # a compiler bug, never user input
            raise StoreError(f"Oxigraph rejected a generated query: {data.decode()}\n{text}")
        return self._read_tsv(data.decode("utf-8"))

    def _ask_child(self, text: str, timeout: float, *, compiled: bool, rows: int | None = None) -> tuple[bytes, bytes]:
        """``text``'s answer from a query process (:mod:`engine.stores.oxigraph_processes`): its
        kind byte and data. A store that cannot be read is a StoreError; past the deadline the
        query is stopped and QueryTimeoutError raised."""
        assert self._processes is not None
        try:
            answer = self._processes.ask(text, timeout, compiled=compiled, rows=rows)
        except QueryTimeoutError:
            raise  # a StoreError too, which the caller words
        except StoreError as e:
            raise StoreError(f"query failed on {self.uri}: {e}") from e
        if answer[:1] == child.FAILED:
            raise StoreError(f"query failed on {self.uri}: {answer[1:].decode()}")
        if answer[:1] == child.DAMAGED:
            raise damaged_store_error(self._processes.path, answer[1:].decode())
        return answer[:1], answer[1:]

    def _answer(self, text: str, limit: int | None = None) -> QueryResult:
        """A raw query's answer, in this process. Run past a caller's deadline
        (:func:`engine.timeouts.run_with_timeout`), it stops at the next solution or triple:
        pyoxigraph computes them one at a time."""
        try:
            with self._damage_named():
                result = self.db.query(text)
        except SyntaxError as e:
            raise InvalidInputError(f"invalid SPARQL query: {e}") from e
        except OSError as e:
            raise StoreError(f"query failed on {self.uri}: {e}") from e
        try:
            with self._damage_named():
                return self._result(result, limit)
        except OSError as e:  # solutions are computed as they are read: a SERVICE call fails here
            raise StoreError(f"query failed on {self.uri}: {e}") from e
        finally:
            # pyoxigraph's answer may only be dropped in the thread that made it; an exception's
            # traceback, kept by a caller in another thread, would otherwise hold it
            del result

    def _result(self, result: Any, limit: int | None = None) -> QueryResult:
        """A pyoxigraph answer as a QueryResult: a boolean, solutions, or triples (or the quads
        of parsed N-Triples); of more than ``limit`` rows, only the first ``limit`` + 1."""
        if isinstance(result, ox.QueryBoolean):
            return QueryResult(["result"], [[bool(result)]])
        decode = self._from_ox
        rows = []
        try:
            if isinstance(result, ox.QuerySolutions):
                names = [v.value for v in result.variables]
                for solution in result:
                    if abandoned():
                        raise Abandoned
                    rows.append([decode(solution[n]) for n in names])
                    if limit is not None and len(rows) > limit:
                        break
                return QueryResult(names, rows)
            for t in result:
                if abandoned():
                    raise Abandoned
                rows.append([decode(t.subject), decode(t.predicate), decode(t.object)])
                if limit is not None and len(rows) > limit:
                    break
            return QueryResult(["subject", "predicate", "object"], rows)
        finally:
            del result  # as in _answer: this frame, kept by a traceback, must not hold it either


def _memory_bytes(gib: object) -> int:
    """``query_memory_gib`` in bytes; 0 for no bound."""
    if isinstance(gib, bool) or not isinstance(gib, (int, float)) or not 0 <= gib <= 1 << 20:
        raise InvalidInputError(
            f"invalid query_memory_gib {gib!r}: give the GiB of memory one query may take (such as 4), or 0 for no bound"
        )
    return int(gib * (1 << 30))


class _Made:
    """What opening a new store at ``path`` is about to create, to remove it again: the folders
    missing on the way to it, or the entries of the folder, where it exists, that are not there yet."""

    def __init__(self, path: str) -> None:
        self.folder = os.path.abspath(path)
        self.new_folders: list[str] = []  # the store's folder first, then each new parent
        here = self.folder
        while not os.path.lexists(here):
            self.new_folders.append(here)
            here = os.path.dirname(here)
        if self.new_folders:
            self.entries_before: set[str] | None = None
        else:
            self.entries_before = set(os.listdir(self.folder)) if os.path.isdir(self.folder) else set()

    def remove(self) -> None:
        if self.entries_before is not None:
            for name in set(os.listdir(self.folder)) - self.entries_before:
                entry = os.path.join(self.folder, name)
                if os.path.isdir(entry) and not os.path.islink(entry):
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.remove(entry)
            return
        shutil.rmtree(self.new_folders[0], ignore_errors=True)
        for parent in self.new_folders[1:]:  # a parent that another store has moved into since stays
            try:
                os.rmdir(parent)
            except OSError:
                break
