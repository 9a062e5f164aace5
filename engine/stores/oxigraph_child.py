"""The program of a query process (:mod:`engine.stores.oxigraph_processes`): it opens an Oxigraph
store read only and answers queries from its parent, one at a time, until its input ends.

It is run as a script (``python -I oxigraph_child.py STORE PACKAGES PARENT MEMORY``: PACKAGES the
folder that holds the parent's pyoxigraph, PARENT the parent's pid, MEMORY the bytes of memory it
may allocate, 0 for no bound) and imports nothing but pyoxigraph and the standard library, so it
starts in a fraction of a second. Each message, either way, is a frame: four bytes of length
(big-endian), then the payload. The child's first frame says that the store is open (or why it is
not); then each request gets one answer. A request is a mode byte (``RAW`` or ``COMPILED``), eight
bytes of row bound (big-endian, 0 for none), then the query's UTF-8 text; an answer is a kind byte
(``SOLUTIONS`` … ``FAILED``), then its data. A raw query with a row bound is read only up to one row
past it, so that the parent can tell the answer was cut. A process whose parent is gone ends
itself, even inside a query.

Past its memory bound (``RLIMIT_DATA``: the heap and private mappings, not the store's files) an
allocation fails: pyoxigraph's Rust aborts the process (SIGABRT), Python raises MemoryError, which
is answered as ``TOO_BIG``.
"""
from __future__ import annotations

import os
import resource
import struct
import sys
import threading
import time
from typing import BinaryIO

# the mode byte that begins a request
RAW = b"R"  # a raw query: any form, its answer in full fidelity
COMPILED = b"C"  # a SELECT the engine compiled: its answer as TSV, as the store reads its own
# the kind byte that begins an answer, and what follows it
READY = b"K"  # the store is open (nothing follows): the first frame, before any request is read
SOLUTIONS = b"S"  # solutions or a boolean, in the SPARQL 1.1 query results JSON format
SOME_SOLUTIONS = b"s"  # a raw SELECT's first solutions (up to its row bound + 1), in the TSV format
TRIPLES = b"T"  # triples (CONSTRUCT, DESCRIBE), as N-Triples
TSV = b"V"  # a compiled SELECT's solutions, in the SPARQL 1.1 TSV results format
BAD_QUERY = b"X"  # the query text is not valid SPARQL: pyoxigraph's message
FAILED = b"O"  # the store could not be opened or read, or the answer not sent: the message
DAMAGED = b"D"  # the store's files are damaged (RocksDB's "Corruption: …"): the message
TOO_BIG = b"M"  # the query needed more memory than the process may take (nothing follows)
LENGTH = struct.Struct(">I")
ROWS = struct.Struct(">Q")  # a request's row bound


def write_frame(out: BinaryIO, payload: bytes) -> None:
    out.write(LENGTH.pack(len(payload)) + payload)
    out.flush()


def read_frame(source: BinaryIO) -> bytes | None:
    """The next frame's payload, or None where the input has ended."""
    head = source.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (length,) = LENGTH.unpack(head)
    payload = source.read(length)
    return payload if len(payload) == length else None


def is_damage(error: BaseException) -> bool:
    """Whether ``error`` is RocksDB's report of a damaged file: pyoxigraph raises it as a
    RuntimeError "Corruption: …", at open or when a query reads the damaged block."""
    return isinstance(error, RuntimeError) and str(error).startswith("Corruption")


def _answer(db: object, mode: bytes, rows: int, text: str) -> bytes:
    import itertools

    import pyoxigraph as ox

    try:
        result = db.query(text)  # type: ignore[attr-defined]
        if mode == COMPILED:
            return TSV + result.serialize(format=ox.QueryResultsFormat.TSV)
        if isinstance(result, ox.QueryBoolean) or (isinstance(result, ox.QuerySolutions) and not rows):
            return SOLUTIONS + result.serialize(format=ox.QueryResultsFormat.JSON)
        if not rows:
            return TRIPLES + result.serialize(format=ox.RdfFormat.N_TRIPLES)
        first = itertools.islice(result, rows + 1)  # never more than the parent keeps, and one to say it cut
        if isinstance(result, ox.QuerySolutions):
            names = list(result.variables)
            # a term's str() is its SPARQL TSV form (N-Triples, escaped); an unbound one is empty
            lines = ["\t".join(str(n) for n in names)]
            lines += ["\t".join("" if (term := s[n]) is None else str(term) for n in names) for s in first]
            return SOME_SOLUTIONS + ("\n".join(lines) + "\n").encode()
        return TRIPLES + ox.serialize(list(first), format=ox.RdfFormat.N_TRIPLES)
    except SyntaxError as e:
        return BAD_QUERY + str(e).encode()
    except MemoryError:
        return TOO_BIG
    except RuntimeError as e:
        return (DAMAGED if is_damage(e) else FAILED) + str(e).encode()
    except Exception as e:  # noqa: BLE001 (an evaluation error is pyoxigraph's OSError; any other goes back too)
        return FAILED + str(e).encode()


def _end_with_parent(parent: int) -> None:
    """End this process once its parent has gone: the parent kills it at a deadline, but a parent
    that is itself killed cannot, and a query may run for hours."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def main(path: str, packages: str, parent: int, memory: int) -> None:
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()
    if memory:
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    source, out = sys.stdin.buffer, sys.stdout.buffer
    sys.path.insert(0, packages)  # the parent's pyoxigraph, wherever it was installed
    try:
        import pyoxigraph as ox

        db = ox.Store.read_only(path)
    except (ImportError, OSError, RuntimeError) as e:
        write_frame(out, DAMAGED + str(e).encode() if is_damage(e) else FAILED + f"cannot open the store at {path}: {e}".encode())
        return
    write_frame(out, READY)
    while (request := read_frame(source)) is not None:
        (rows,) = ROWS.unpack_from(request, 1)
        answer = _answer(db, request[:1], rows, request[1 + ROWS.size:].decode("utf-8"))
        if len(answer) >= 1 << (8 * LENGTH.size):
            answer = FAILED + f"the answer takes {len(answer):,} bytes, more than a frame holds: narrow the query".encode()
        write_frame(out, answer)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
