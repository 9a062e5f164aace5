"""Immediate TCP acknowledgements on a client's reads (Linux ``TCP_QUICKACK``).

A server that writes an answer in pieces on a socket without ``TCP_NODELAY`` has Nagle's
algorithm hold a piece until the client acknowledges the ones before it, and Linux delays that
acknowledgement by up to 40 ms (it waits for the client's next request to carry it). Asking the
kernel to acknowledge at once before every read (Linux leaves that mode again on its own)
removes the wait. FalkorDB's Bolt endpoint (:mod:`engine.stores.bolt_quickack`) and Virtuoso's
HTTP endpoint (:mod:`engine.stores.sparql_http`) both write that way. On a platform without
``TCP_QUICKACK`` nothing changes and such answers are only slower.
"""
from __future__ import annotations

import socket
from typing import Any

OPTION: int | None = getattr(socket, "TCP_QUICKACK", None)


def ask(sock: Any) -> None:
    """Ask for immediate acknowledgements of what ``sock`` receives next."""
    if OPTION is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, OPTION, 1)
    except (OSError, AttributeError):  # not a TCP socket (a test double), or already closed
        pass


class QuickAckSocket(socket.socket):
    """A TCP socket whose every read asks for immediate acknowledgements first (``recv_into``
    is what ``socket.makefile`` reads through, as ``http.client`` does)."""

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        ask(self)
        return super().recv_into(buffer, nbytes, flags)


def adopt(sock: socket.socket) -> socket.socket:
    """The same connection as a :class:`QuickAckSocket` (its timeout kept), or ``sock`` itself
    where the platform has no ``TCP_QUICKACK`` or it is some other kind of socket."""
    if OPTION is None or type(sock) is not socket.socket:
        return sock
    timeout = sock.gettimeout()
    adopted = QuickAckSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    adopted.settimeout(timeout)
    return adopted
