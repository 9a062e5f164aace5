"""Immediate TCP acknowledgements on the Bolt driver's reads, for FalkorDB's Bolt endpoint.

FalkorDB writes an answer of more than about 4 KB in two pieces on a socket without
``TCP_NODELAY``, so Nagle's algorithm holds the second piece until the client acknowledges the
first, and Linux delays that acknowledgement by up to 40 ms (it waits for the client's next
request to carry it), so every FalkorDB answer past ≈ 4 KB waited that long. Asking the kernel
to acknowledge at once (``TCP_QUICKACK``; Linux leaves that mode again on its own, so it is
asked before every read) removes the wait (docs/design/quick-acks.md).

The Neo4j driver has no hook for its sockets, so :func:`install` wraps the read method of the
driver's socket class, once per process, when a store connects to FalkorDB. Where that class
is not where this driver version keeps it, or the platform has no ``TCP_QUICKACK``, nothing is
installed and such answers are only slower. Neo4j's server sends without delay, so other Bolt
connections of the process see nothing but a few more acknowledgement packets. The asking
itself is :mod:`engine.stores.quick_ack`'s, shared with the SPARQL endpoint's connections.
"""
from __future__ import annotations

import threading
from typing import Any

from engine.stores import quick_ack

_lock = threading.Lock()
_installed = False


def install() -> bool:
    """Wrap the driver's socket reads to ask for immediate acknowledgements; whether they are."""
    global _installed
    with _lock:
        if _installed:
            return True
        try:
            from neo4j._async_compat.network._bolt_socket import BoltSocketBase
        except ImportError:
            return False
        read = BoltSocketBase.__dict__.get("recv_into")
        if quick_ack.OPTION is None or read is None:
            return False

        def recv_into(self: Any, buffer: Any, nbytes: int) -> int:
            quick_ack.ask(getattr(self, "_socket", None))
            return read(self, buffer, nbytes)

        BoltSocketBase.recv_into = recv_into  # type: ignore[method-assign]
        _installed = True
        return True


def installed() -> bool:
    return _installed
