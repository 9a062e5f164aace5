"""What a test database server offers the fixtures.

Each server module (``virtuoso.py``, ``falkordb.py``) exposes ``start(workdir) -> Server``
that starts a real server on free loopback ports, or raises ``ServerUnavailable`` saying what
is missing (a binary, a package).
"""
from __future__ import annotations

import socket
from abc import ABC, abstractmethod

from engine.store import Store


class ServerUnavailable(RuntimeError):
    """The server cannot be started here; the message says what is missing."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server(ABC):
    @abstractmethod
    def new_store(self, name: str) -> Store:
        """A fresh, empty store on this server (its own graph / database named after ``name``)."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server and remove what it wrote."""
