"""The Bolt/Cypher store: Neo4j 5 through the official ``neo4j`` driver.

The Cypher comes from ``cypher/compiler.py`` (operations) and ``cypher/schema.py`` (indexes,
bulk writes); every operation is one round trip for the whole batch. Reads run in read
transactions (routed to readers on ``neo4j://``), writes in write transactions.

FalkorDB, which speaks Bolt and announces itself as Neo4j 5.13, stands in for Neo4j in the
tests. The store tells them apart when it connects (``dbms.components()`` exists only on
Neo4j) and works around FalkorDB 4.16's Bolt endpoint:
- it pastes Bolt parameters into the query text unescaped, through a 4 KB stack buffer, so
  parameters are bound in FalkorDB's own ``CYPHER name=value`` header instead
  (:func:`cypher.params.inline_parameters`);
- after a client says GOODBYE (the driver does on close) it leaves the next connection given
  the same socket number unanswered; the store closes its connections without GOODBYE
  (:meth:`BoltStore._drop_connections`), takes a stuck number itself after closing
  (:meth:`BoltStore._unstick_falkordb`) and retries a connect whose handshake went unanswered;
- it sends a message over 64 KiB as one chunk whose 16-bit length wraps, which the driver
  reads as garbage or waits on forever: the store keeps what it loads small enough
  (:mod:`engine.limits`), and every call has a deadline;
- its string index trims the keys it stores and does not check its hits, so entities are
  looked up and created differently there (:class:`cypher.compiler.FalkorDBCompiler`);
- it ignores the database name: every transaction uses the graph ``falkordb``, so two stores
  on one FalkorDB server share one graph whatever ``database`` says;
- it does not enforce read transactions, which leaves :meth:`query`'s own check as the guard;
- it drops the connection on a query text of exactly 4073 bytes (plus any multiple of 4096),
  so such a text gets one trailing blank.
- its error for a character outside ASCII in a query's code (not in a string, comment or
  backticked name) quotes the character's first byte alone, which the driver cannot decode, so it
  drops the connection; and its parser takes time exponential in how deep expressions nest:
  :func:`cypher.readonly.check_shape` refuses both in raw queries.
"""
from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

import neo4j
import neo4j.graph
from neo4j.exceptions import (
    AuthError,
    ConfigurationError,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
)
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from cypher import schema
from cypher.compiler import FALKORDB, NEO4J, CypherCompiler
from cypher.params import inline_parameters
from cypher.readonly import check_parameters, check_read_only, check_shape
from cypher.terms import literal_key
from engine import limits
from engine.errors import (
    InvalidInputError,
    KGQAError,
    QueryTimeoutError,
    StoreError,
    StoreUnavailableError,
)
from engine.graph import NAME_RELATION, Edge, Literal, Path, Term, Triple, build_each
from engine.identifiers import RELATION_PATTERN, positive_int, positive_seconds, validate_timeout
from engine.limits import TermCheck, term_check
from engine.uris import redacted, split_uri
from engine.ops import (
    Compiled,
    CountEntities,
    CountTriples,
    Op,
    RelationCounts,
    RelationTypes,
)
from engine.results import (
    QueryResult,
    RelationCount,
    SearchHit,
    StoreStats,
    TwoHopRelation,
)
from engine.sexpr.tree import Count
from engine.store import Store
from engine.stores import bolt_quickack
from engine.timeouts import Abandoned, Budget, abandoned, run_with_timeout

DEFAULT_BOLT_PORT = 7687
BOLT_SCHEMES = ("bolt://", "bolt+s://", "bolt+ssc://", "neo4j://", "neo4j+s://", "neo4j+ssc://")
#: A Bolt handshake: the magic number, then the versions asked for (5.0-5.7, 4.4).
BOLT_HANDSHAKE = bytes.fromhex("6060b017" "00070705" "00000404" "00000000" "00000000")
#: FalkorDB 4.16 drops the connection on a query of exactly 4073 bytes (or 4073 + 4096 k);
#: such a query gets one trailing blank
_FALKORDB_BAD_LENGTH = 4073
#: relation types counted per query by ``stats`` (one UNION branch each)
_COUNT_BRANCHES = 100


def _node(node_id: str | None, value: str, datatype: str | None, lang: str | None) -> Term:
    """A node read back from its columns: an entity id, or else a literal."""
    return node_id if node_id is not None else Literal.make(value, datatype, lang)


def _value(value: Any) -> Any:
    """A value of a raw query result in the engine's terms: nodes as ids or Literals,
    relationships as their type, paths as :class:`engine.graph.Path`."""
    if isinstance(value, neo4j.graph.Node):
        return _node_value(value)
    if isinstance(value, neo4j.graph.Relationship):
        return value.type
    if isinstance(value, neo4j.graph.Path):
        nodes = value.nodes
        return Path(
            tuple(_node_value(n) for n in nodes),
            tuple(r.type for r in value.relationships),
            tuple(r.start_node.element_id == nodes[i].element_id for i, r in enumerate(value.relationships)),
        )
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    if hasattr(value, "iso_format"):  # neo4j.time values
        return value.iso_format()
    return value


def _node_value(node: neo4j.graph.Node) -> Any:
    props = dict(node)
    if "id" in props:
        return props["id"]
    if "key" in props and "value" in props:
        return Literal.make(props["value"], props.get("datatype"), props.get("lang"))
    return props


#: the longest wait for a Bolt handshake (the store's timeout when that is shorter)
HANDSHAKE_SECONDS = 5.0


class BoltStore(Store):
    """A Neo4j 5 (or FalkorDB) database reached over Bolt.

    ``uri`` is ``bolt://[user:password@]host[:port][?database=NAME]`` (also ``neo4j://`` for a
    cluster, and the ``+s`` / ``+ssc`` TLS schemes). Credentials come from the arguments, else
    the URI, else ``NEO4J_USER`` / ``NEO4J_PASSWORD``. ``batch_size`` bounds the rows of one
    bulk write; ``timeout`` (seconds) bounds connecting and every call (each statement of a
    load too): past it the call raises :class:`engine.errors.QueryTimeoutError`, also when the
    server has stopped answering.
    ``namespace`` is accepted for symmetry with the RDF stores and ignored.
    """

    dialect = "cypher"
    load_batch_size = 200_000  # bigger batches group more edges per relationship type into one UNWIND

    def __init__(
        self,
        uri: str,
        user: str | None = None,
        password: str | None = None,
        database: str | None = None,
        timeout: float = 30.0,
        namespace: str | None = None,
        batch_size: int = 5000,
    ) -> None:
        timeout = positive_seconds(timeout)
        batch_size = positive_int(batch_size, "batch_size")
        address, uri_user, uri_password, uri_database, self.uri = _parse_uri(uri)
        self._host, self._port = _host_port(address)
        self.timeout = float(timeout)
        self.batch_size = batch_size
        self._database = database or uri_database
        user = user if user is not None else uri_user if uri_user is not None else os.environ.get("NEO4J_USER")
        if password is None:
            password = uri_password if uri_password is not None else os.environ.get("NEO4J_PASSWORD")
        try:
            self._driver = neo4j.GraphDatabase.driver(
                address,
                auth=None if user is None else (user, password or ""),
                # a handshake is answered at once or never: FalkorDB's listener can sit on one
                # socket number (see _connect), and only a new connection gets past it, so a
                # short handshake wait lets the driver's own retry open that new connection
                connection_timeout=min(self.timeout, HANDSHAKE_SECONDS),
                connection_acquisition_timeout=self.timeout,
                max_transaction_retry_time=self.timeout,
                user_agent="kgqa-engine",
            )
        except (ConfigurationError, ValueError) as e:
            raise InvalidInputError(f"invalid Bolt URI {self.uri!r}: {e}") from e
        self._closed = False
        self._falkordb = False
        self._schema_ready = False
        try:
            self._falkordb = self._connect()
        except StoreUnavailableError:
            self._driver.close()
            raise
        self.compiler: CypherCompiler = FALKORDB if self._falkordb else NEO4J
        if self._falkordb:
            bolt_quickack.install()  # FalkorDB's answers over ≈ 4 KB otherwise wait ≈ 40 ms for an ACK
        self._term_check = term_check(limits.FALKORDB if self._falkordb else limits.NEO4J)

    # ------------------------------------------------------------------ connection
    def _connect(self) -> bool:
        """Check that the server answers; True when it is FalkorDB rather than Neo4j. A failed
        handshake is retried: a server just started, or a FalkorDB socket number left stuck
        by another client's GOODBYE, which the unanswered connection has now taken."""
        retrying = Retrying(
            # a second attempt gets past a stuck socket number; a silent server costs two waits
            stop=stop_after_attempt(3) | stop_after_delay(1.5 * self.timeout),
            wait=wait_fixed(0.5),
            retry=retry_if_exception_type((ServiceUnavailable, SessionExpired)),
            reraise=True,
        )
        try:
            retrying(self._driver.verify_connectivity)
            # a server that took the handshake and then stopped answering must not hang us
            return run_with_timeout(self._detect_falkordb, self.timeout, f"the Bolt server at {self.uri}")
        except QueryTimeoutError as e:
            raise StoreUnavailableError(
                f"the Bolt server at {self.uri} took the connection but did not answer within {self.timeout:g} s "
                "(timeout=): is it stopped or overloaded?"
            ) from e
        except (ServiceUnavailable, SessionExpired) as e:
            raise StoreUnavailableError(
                f"cannot reach the Bolt server at {self.uri}: {e}. Check that it is running and that "
                "the URI's host and port are right"
            ) from e
        except Neo4jError as e:  # AuthError from Neo4j; FalkorDB fails a bad login as a DatabaseError
            raise StoreUnavailableError(self._auth_message(e)) from e
        except DriverError as e:
            raise StoreUnavailableError(f"cannot connect to the Bolt server at {self.uri}: {e}") from e

    def _detect_falkordb(self) -> bool:
        try:
            self._transact(schema.NEO4J_COMPONENTS, {}, write=False)
            return False
        except AuthError:
            raise
        except Neo4jError:
            pass
        self._transact("RETURN 1", {}, write=False)  # not Neo4j, but it must answer Cypher
        return True

    def _auth_message(self, error: Exception) -> str:
        return (
            f"the Bolt server at {self.uri} refused us ({error}). Check the user and password "
            "(arguments, the URI's user:password@, or NEO4J_USER / NEO4J_PASSWORD) and the database name"
        )

    def _unstick_falkordb(self) -> None:
        """After a GOODBYE, FalkorDB 4.16 frees the connection but leaves its socket number
        registered, so the next connection given that number is never answered. Two probe
        handshakes, dropped once one is answered, leave the other holding that number."""
        with contextlib.suppress(OSError), contextlib.ExitStack() as stack:
            probes = [stack.enter_context(socket.create_connection((self._host, self._port), 1.0)) for _ in range(2)]
            for probe in probes:
                probe.sendall(BOLT_HANDSHAKE)
            select.select(probes, [], [], 1.0)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._falkordb:
            self._drop_connections()
        self._driver.close()
        if self._falkordb:
            self._unstick_falkordb()

    def _drop_connections(self) -> None:
        """Close every pooled connection without Bolt's GOODBYE, which leaves FalkorDB 4.16
        unable to answer the next client given the same socket number: a store used by 8
        threads left 8 of them, and the next stores to open waited out their timeouts. (The
        driver has no public way to skip GOODBYE: this reaches into its pool.)"""
        pool = getattr(self._driver, "_pool", None)
        if pool is None or not hasattr(pool, "connections"):
            return
        with pool.lock:
            connections = [c for queue in pool.connections.values() for c in queue]
        for connection in connections:
            with contextlib.suppress(Exception):  # best effort: driver.close() follows anyway
                connection.kill()

    # ------------------------------------------------------------------ running Cypher
    def _transact(
        self, text: str, params: dict[str, Any], *, write: bool, timeout: float | None = None
    ) -> tuple[list[str], list[list[Any]]]:
        """Run one statement in its own transaction; its column names and rows. Driver errors
        propagate. With a ``timeout`` (a read bounded by the caller) the transaction is an
        explicit one of at most that many seconds, never retried: a retry would run past the
        deadline, and an abandoned query must not keep reconnecting. Without one, the driver's
        retries of a lost connection stop once the caller has stopped waiting (:mod:`engine.timeouts`),
        so a statement is never run again after its caller got a timeout. (Not an auto-commit one:
        FalkorDB then reads the database name, which it ignores in transactions.)"""
        if self._closed:
            raise StoreError(f"the store {self.uri} is closed")
        if self._falkordb:
            text, params = inline_parameters(text, params), {}
            if len(text.encode("utf-8")) % 4096 == _FALKORDB_BAD_LENGTH:
                text += " "

        if timeout is not None and not write:
            with self._driver.session(database=self._database, default_access_mode=neo4j.READ_ACCESS) as session:
                with session.begin_transaction(timeout=timeout) as tx:
                    result = tx.run(text, params)
                    return list(result.keys()), [record.values() for record in result]

        @neo4j.unit_of_work(timeout=self.timeout)
        def work(tx: neo4j.ManagedTransaction) -> tuple[list[str], list[list[Any]]]:
            if abandoned():  # the driver retries a lost connection; the caller has its timeout already
                raise Abandoned
            result = tx.run(text, params)
            return list(result.keys()), [record.values() for record in result]

        with self._driver.session(database=self._database) as session:
            return session.execute_write(work) if write else session.execute_read(work)

    def _execute(
        self, text: str, params: dict[str, Any], *, write: bool, timeout: float | None = None
    ) -> tuple[list[str], list[list[Any]]]:
        """:meth:`_transact` with driver errors turned into the engine's, and a deadline: the
        call's ``timeout``, else the store's. Neo4j stops a transaction at its timeout;
        FalkorDB ignores it, and a stopped server (or a FalkorDB answer the driver cannot read,
        see :mod:`engine.limits`) answers nothing at all, so the call stops waiting at the
        deadline (:mod:`engine.timeouts`)."""
        limit = self.timeout if timeout is None else timeout
        # on Neo4j the server's own stop normally comes first; the deadline is a backstop
        deadline, server = (limit, "FalkorDB") if self._falkordb else (limit + 1.0, "the Bolt server")
        started = time.monotonic()
        try:
            return run_with_timeout(lambda: self._transact(text, params, write=write, timeout=timeout), deadline, server)
        except QueryTimeoutError as e:
            if timeout is not None:
                raise  # a deadline the caller chose (execute): reported as such
            cause = (
                ", or its answer holds a row over 64 KiB, which FalkorDB's Bolt endpoint cannot send. FalkorDB "
                "runs a query on to its end or to the server's TIMEOUT_MAX, whatever the client's timeout"
                if self._falkordb else ""
            )
            raise QueryTimeoutError(
                f"the Bolt server at {self.uri} did not answer within {limit:g} s (the store's timeout=): it may "
                f"be stopped or overloaded{cause}. {'A write may still complete; loading again is safe. ' if write else ''}"
                "Raise timeout= for long calls"
            ) from e
        except (ServiceUnavailable, SessionExpired) as e:
            raise StoreUnavailableError(f"lost the Bolt server at {self.uri}: {e}") from e
        except AuthError as e:
            raise StoreUnavailableError(self._auth_message(e)) from e
        except Neo4jError as e:
            if timeout is not None and "TransactionTimedOut" in (e.code or ""):
                raise QueryTimeoutError(f"Neo4j stopped it: {e.message or e}") from e
            if self._falkordb and (e.code or "").endswith(".UnknownError"):
                # FalkorDB's Bolt endpoint gives every failure this one code and message
                raise StoreError(
                    f"FalkorDB at {self.uri} failed the query after {time.monotonic() - started:.1f} s without "
                    "saying why: the query is not one it runs, or it ran past the server's TIMEOUT_MAX (kgqa "
                    "server falkordb --query-timeout)"
                ) from e
            raise StoreError(f"the Bolt server at {self.uri} failed the query: {e.message or e}") from e
        except DriverError as e:
            raise StoreError(f"the Bolt driver failed on {self.uri}: {e}") from e
        except KGQAError:
            raise
        except (ValueError, UnicodeError) as e:
            # an answer the driver cannot decode (FalkorDB quotes part of a character in some
            # errors): the driver drops that connection, the next call opens another
            raise StoreError(f"the Bolt driver could not read the answer of {self.uri}: {e}") from e

    def _rows(self, compiled: Compiled, *, write: bool = False, timeout: float | None = None) -> list[list[Any]]:
        if timeout is None:
            return self._execute(*compiled, write=write)[1]
        return self._execute(*compiled, write=write, timeout=timeout)[1]

    # ------------------------------------------------------------------ writing
    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        if self._falkordb:
            statements = schema.falkordb_missing_indexes(self._rows((schema.FALKORDB_LIST_INDEXES, {})))
        else:
            statements = list(schema.NEO4J_SCHEMA)
        for statement in statements:  # schema changes may not share a transaction with data
            self._rows((statement, {}), write=True)
        self._schema_ready = True

    def term_check(self) -> TermCheck | None:
        return self._term_check

    def _add_triples(self, triples: Iterable[Triple]) -> None:
        """MERGE the triples (validated and checked against the server's limits by
        :meth:`add_triples` before any is written) in batches of ``batch_size`` rows, one
        statement per relationship type and object kind; loading the same triples again
        changes nothing. Each batch is its own transaction, so a failure keeps what earlier
        batches wrote."""
        rows = list(dict.fromkeys(triples))
        if not rows:
            return
        self._ensure_schema()
        for compiled in schema.edge_batches(rows, self.batch_size, self.compiler):
            self._rows(compiled, write=True)
        named = sorted({t.subject for t in rows if t.relation == NAME_RELATION and isinstance(t.object, Literal)})
        for start in range(0, len(named), self.batch_size):
            chunk = named[start:start + self.batch_size]
            display = {i: name for i, name in self.names(chunk).items() if name is not None}
            for compiled in schema.name_batches(display, self.batch_size, self.compiler):
                self._rows(compiled, write=True)

    def count_triples(self) -> int:
        return self._call(CountTriples())[0]

    def stats(self) -> StoreStats:
        """Counts; relation types that are not valid relation names (written by other tools)
        are left out of the per-relation counts."""
        entities = self._call(CountEntities())[0]
        return StoreStats(self.count_triples(), entities, self._relation_counts())

    def relation_names(self, *, timeout: float | None = None) -> list[str]:
        return list(self._relation_counts(validate_timeout(timeout)))

    def _relation_counts(self, timeout: float | None = None) -> dict[str, int]:
        """Edges per relation type that is a valid relation name and has edges (a database
        lists a type whose edges were all deleted), sorted by relation; the look-ups share
        ``timeout`` (seconds; None: none)."""
        budget = Budget(timeout, "relation_names")
        types = sorted(t for t in self._call(RelationTypes(timeout=budget.left())) if RELATION_PATTERN.fullmatch(t))
        counts: dict[str, int] = {}
        for start in range(0, len(types), _COUNT_BRANCHES):
            part = RelationCounts(tuple(types[start:start + _COUNT_BRANCHES]), timeout=budget.left())
            for relation, count in self._call(part):
                if count:
                    counts[relation] = count
        return counts

    # ------------------------------------------------------------------ operations
    def _run(self, op: Op, compiled: Compiled | None) -> list:
        rows = self._rows(compiled, timeout=op.timeout)  # type: ignore[arg-type]
        return getattr(self, "_decode_" + op.name)(op, rows)

    def _decode_relations(self, op, rows: list[list[Any]]) -> list[RelationCount]:
        return [RelationCount(*row) for row in rows]

    def _decode_expand(self, op, rows: list[list[Any]]) -> list[Edge]:
        if not rows:
            return []
        srcs, rels, ids, values, datatypes, langs, forwards = zip(*rows)
        return build_each(Edge, srcs, rels, list(map(_node, ids, values, datatypes, langs)), forwards)

    def _decode_walks(self, op, rows: list[list[Any]]) -> list[Path]:
        fixed = None if None in op.path else op.path  # then every row has the path's relations
        return [
            Path(
                tuple(ids) if ids[-1] is not None else (*ids[:-1], Literal.make(v, dt, lang)),
                fixed or tuple(rels),
                tuple(fwd),
            )
            for ids, v, dt, lang, rels, fwd in rows
        ]

    def _decode_two_hop_relations(self, op, rows: list[list[Any]]) -> list[TwoHopRelation]:
        return [TwoHopRelation(i, op.r1, rel, d, n) for i, rel, d, n in rows]

    def _decode_literal_relations(self, op, rows: list[list[Any]]) -> list[RelationCount]:
        by_key = {literal_key(lit): lit for lit in op.literals}
        return [RelationCount(by_key[key], rel, "in", n) for key, rel, n in rows]

    def _decode_literal_two_hop_relations(self, op, rows: list[list[Any]]) -> list[TwoHopRelation]:
        by_key = {literal_key(lit): lit for lit in op.literals}
        return [TwoHopRelation(by_key[key], op.r1, rel, d, n) for key, rel, d, n in rows]

    def _decode_names(self, op, rows: list[list[Any]]) -> list[tuple[str, Literal | None]]:
        return [(i, None if value is None else Literal(value, datatype, lang)) for i, value, datatype, lang in rows]

    def _decode_types(self, op, rows: list[list[Any]]) -> list[tuple[str, str]]:
        return [(i, t) for i, t in rows]

    def _decode_search(self, op, rows: list[list[Any]]) -> list[SearchHit]:
        return [SearchHit(i, i if name is None else name) for i, name in rows]

    def _decode_execute(self, op, rows: list[list[Any]]) -> list:
        if isinstance(op.tree, Count):
            return [rows[0][0]]
        return [_node(i, v, dt, lang) for i, v, dt, lang in rows]

    def _decode_count_triples(self, op, rows: list[list[Any]]) -> list[int]:
        return [rows[0][0]]

    _decode_count_entities = _decode_count_triples

    def _decode_entities(self, op, rows: list[list[Any]]) -> list[str]:
        return [i for (i,) in rows]

    def _decode_relation_types(self, op, rows: list[list[Any]]) -> list[str]:
        return [t for (t,) in rows]

    def _decode_relation_counts(self, op, rows: list[list[Any]]) -> list[tuple[str, int]]:
        return [(op.relations[i], count) for i, count in rows]

    def _query(
        self, text: str, params: dict[str, Any], allow_service: bool, timeout: float | None, limit: int | None
    ) -> QueryResult:
        check_read_only(text)
        check_shape(text)
        check_parameters(text, params)
        columns, rows = self._execute(text, params, write=False, timeout=timeout)
        return QueryResult(columns, [[_value(v) for v in row] for row in rows])


def _host_port(address: str) -> tuple[str, int]:
    parts = split_uri(address)
    return parts.hostname or "localhost", parts.port or DEFAULT_BOLT_PORT


def _parse_uri(uri: str) -> tuple[str, str | None, str | None, str | None, str]:
    """Split a Bolt URI into the driver's address (no credentials, no ``database``), user,
    password, database, and the URI as shown in messages (without the password)."""
    if not isinstance(uri, str) or not uri.startswith(BOLT_SCHEMES):
        shown = redacted(uri) if isinstance(uri, str) else uri
        raise InvalidInputError(f"invalid Bolt URI {shown!r}: use bolt://host:port or neo4j://host:port")
    shown = redacted(uri)
    parts = split_uri(uri)
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    hostport = parts.netloc.rpartition("@")[2]
    if not hostport:
        raise InvalidInputError(f"invalid Bolt URI {shown!r}: it names no host")
    database = None
    routing: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "database":
            database = value or None
        elif parts.scheme.startswith("neo4j"):
            routing.append((key, value))  # a cluster's routing context
        else:
            raise InvalidInputError(f"unknown option {key!r} in Bolt URI {shown!r}: only ?database=NAME is understood")
    query = f"?{urlencode(routing)}" if routing else ""
    return f"{parts.scheme}://{hostport}{query}", user, password, database, shown
