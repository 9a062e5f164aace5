"""Shared fixtures: every store kind started for real, and the data in ../shared.

Under ``CI=true`` nothing is skipped: a server that cannot start, or a missing ../shared,
fails the test. Elsewhere those tests skip, saying what is missing.
"""
from __future__ import annotations

import importlib
import itertools
import os
import socket
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from engine.errors import InvalidInputError
from engine.graph import Triple
from engine.servers.base import Server, ServerUnavailable
from engine.store import Store
from loaders.datasets import data_dir

ON_CI = os.environ.get("CI", "").lower() == "true"

#: store kinds every differential test runs on; "neo4j" joins when NEO4J_URI is set
STORE_KINDS = ["oxigraph", "virtuoso", "bolt"] + (["neo4j"] if os.environ.get("NEO4J_URI") else [])
_SERVER_MODULES = {"virtuoso": "engine.servers.virtuoso", "bolt": "engine.servers.falkordb", "neo4j": "tests.neo4j_server"}
_counter = itertools.count()


def missing(reason: str) -> None:
    """Skip for a missing server or dataset, or fail under CI where nothing may skip."""
    if ON_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def servers(tmp_path_factory) -> Iterable[dict[str, Server | str]]:
    """Servers started lazily, once per session; a value is a Server or why it is missing."""
    started: dict[str, Server | str] = {}
    yield started
    for server in started.values():
        if isinstance(server, Server):
            server.stop()


def _store_factory(servers: dict, tmp_path_factory) -> tuple[Callable[..., Store], list[Store]]:
    opened: list[Store] = []

    def factory(kind: str, triples: Iterable[Triple] = ()) -> Store:
        if kind == "oxigraph":
            from engine.stores.oxigraph import OxigraphStore

            store: Store = OxigraphStore(None)
        else:
            if kind not in servers:
                try:
                    module = importlib.import_module(_SERVER_MODULES[kind])
                    servers[kind] = module.start(tmp_path_factory.mktemp(kind))
                except ServerUnavailable as e:
                    servers[kind] = str(e)
            server = servers[kind]
            if isinstance(server, str):
                missing(f"the {kind} store is unavailable: {server}")
            store = server.new_store(f"t{os.getpid()}_{next(_counter)}")  # type: ignore[union-attr]
        opened.append(store)
        triples = list(triples)
        if triples:
            store.add_triples(triples)
        return store

    return factory, opened


@pytest.fixture
def make_store(servers, tmp_path_factory) -> Iterable[Callable[..., Store]]:
    """``make_store(kind, triples=())``: a fresh store of that kind holding ``triples``."""
    factory, opened = _store_factory(servers, tmp_path_factory)
    yield factory
    for store in opened:
        store.close()


@pytest.fixture(scope="module")
def make_module_store(servers, tmp_path_factory) -> Iterable[Callable[..., Store]]:
    """Like ``make_store``, for stores that a whole test module shares (large real graphs)."""
    factory, opened = _store_factory(servers, tmp_path_factory)
    yield factory
    for store in opened:
        store.close()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request) -> str:
    return request.param


class Backend:
    """``backend(triples=())``: a fresh store of one kind holding ``triples``."""

    def __init__(self, kind: str, make: Callable[..., Store]) -> None:
        self.kind = kind
        self._make = make

    def __call__(self, triples: Iterable[Triple] = ()) -> Store:
        return self._make(self.kind, triples)

    def __repr__(self) -> str:
        return f"Backend({self.kind!r})"


@pytest.fixture(params=STORE_KINDS)
def store(request, make_store) -> Backend:
    """The contract fixture: the test runs once per store kind, and ``store(triples)`` opens
    a fresh store of that kind (``store.kind`` names it).

    A known gap is declared on the test, with its reason and the error it fails with:
    ``@pytest.mark.notimpl(["virtuoso"], reason="…", raises=AssertionError)``. On those kinds
    the test is a strict xfail: it must fail with that error, so a gap that closes is
    reported too; nothing is skipped."""
    kind = request.param
    for mark in request.node.iter_markers("notimpl"):
        if kind in mark.args[0]:
            request.applymarker(
                pytest.mark.xfail(
                    reason=f"not on {kind}: {mark.kwargs['reason']}", raises=mark.kwargs["raises"], strict=True
                )
            )
    return Backend(kind, make_store)


@pytest.fixture
def quick_acks_asked(monkeypatch) -> list[int]:
    """The values every socket of the process is asked to set TCP_QUICKACK to from now on
    (Linux only: skips elsewhere)."""
    if not hasattr(socket, "TCP_QUICKACK"):
        pytest.skip("no TCP_QUICKACK on this platform")
    asked: list[int] = []
    real = socket.socket.setsockopt

    def setsockopt(sock, level, option, value):
        if option == socket.TCP_QUICKACK:
            asked.append(value)
        return real(sock, level, option, value)

    monkeypatch.setattr(socket.socket, "setsockopt", setsockopt)
    return asked


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The datasets directory, found as the engine finds it ($KGQA_DATA or ../shared/data)."""
    try:
        return data_dir()
    except InvalidInputError as e:
        missing(str(e))


@pytest.fixture(scope="session")
def kgqa_script() -> Path:
    """The installed ``kgqa`` console script of the Python running the tests."""
    script = Path(sysconfig.get_path("scripts")) / "kgqa"
    assert script.is_file(), f"no kgqa console script at {script}: install the project (make setup)"
    return script
