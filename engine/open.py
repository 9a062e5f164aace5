"""Open a store by URI.

| URI | store |
|---|---|
| a directory path, ``oxigraph:PATH`` | embedded Oxigraph on disk (the default) |
| ``memory:`` | embedded Oxigraph in memory |
| ``http(s)://host:port/sparql`` | Virtuoso or any SPARQL 1.1 endpoint |
| ``bolt://``, ``bolt+s://``, ``neo4j://``, ``neo4j+s://`` | Neo4j (or another Bolt/Cypher server) |
"""
from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError, clipped
from engine.identifiers import validate_flag, validate_text
from engine.store import Store
from engine.uris import split_uri

DEFAULT_STORE = os.path.join("kgqa-data", "store")


def beside_store(store: Store, suffix: str) -> Path | None:
    """``<store folder><suffix>`` beside an embedded store on disk, for what belongs to the
    store but is not its data (never inside the folder Oxigraph manages); None for other stores."""
    folder = getattr(store, "path", None)
    if not folder:
        return None
    resolved = Path(folder).resolve()
    return resolved.with_name(resolved.name + suffix)


def open_store(uri: str | None = None, *, create: bool = True, read_only: bool = False, **options: Any) -> Store:
    """Open the store named by ``uri`` (default: an embedded Oxigraph store in ``kgqa-data/store``).
    ``create=False``: an embedded store must exist already (see :class:`OxigraphStore`).
    ``read_only=True``: an embedded store must exist, and is opened for reading only, shared with
    other readers (a writer holds it alone); servers arbitrate their readers and writers themselves.

    Options are passed to the store's constructor (``namespace=`` for RDF stores, ``user=``,
    ``password=``, ``database=`` for Bolt, ``timeout=`` for remote stores).
    """
    if uri is None:  # an empty $KGQA_STORE is unset, as an empty $KGQA_TOKEN is
        uri = os.environ.get("KGQA_STORE") or DEFAULT_STORE
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidInputError(
            f"invalid store URI {clipped(repr(uri), 200)}: give a directory, memory:, http(s)://… or bolt://…; "
            f"leave it out for $KGQA_STORE, else {DEFAULT_STORE}"
        )
    validate_text(uri, "store URI", nul=False)  # no folder, host or database name can hold them
    create = validate_flag(create, "create")
    read_only = validate_flag(read_only, "read_only")
    if uri.startswith(("bolt", "neo4j", "http://", "https://")):
        split_uri(uri)
    if uri.startswith(("bolt", "neo4j")):  # the Bolt store checks the exact scheme
        from engine.stores.bolt import BoltStore

        return _make(BoltStore, uri, **options)
    if uri.startswith(("http://", "https://")):
        from engine.stores.sparql_endpoint import SparqlEndpointStore

        return _make(SparqlEndpointStore, uri, **options)
    from engine.stores.oxigraph import OxigraphStore

    if uri == "memory:":
        return _make(OxigraphStore, None, **options)  # nothing to share: read_only does not apply
    path = uri[len("oxigraph:"):] if uri.startswith("oxigraph:") else uri
    if not path.strip():
        raise InvalidInputError(f"store URI {uri!r} names no folder: give oxigraph:PATH, a directory, or memory: for a store in memory")
    if "://" in path:
        raise InvalidInputError(
            f"unknown store URI scheme in {uri!r}: use a directory, memory:, http(s)://…/sparql, bolt:// or neo4j://"
        )
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", path)  # two letters at least: C: is a Windows drive
    if scheme and not os.path.exists(path):  # MEMORY: or memroy: would make a folder of that name
        raise InvalidInputError(
            f"store URI {clipped(repr(uri), 200)} begins with {scheme.group()}, which is no scheme the engine knows: "
            f"use memory:, oxigraph:PATH, a directory, http(s)://…/sparql, bolt:// or neo4j://; for a folder whose "
            f"name holds a colon, write ./{clipped(path, 200)}"
        )
    return _make(OxigraphStore, path, create=create, read_only=read_only, **options)


def _make(store_type: type[Store], *args: Any, **options: Any) -> Store:
    """``store_type(*args, **options)``, an option that kind of store does not take named first
    (rather than a TypeError, which a mistake inside the constructor would raise too)."""
    parameters = inspect.signature(store_type).parameters
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        takes = [name for name, p in parameters.items()
                 if p.default is not p.empty and name not in ("create", "read_only")]  # those open_store sets
        raise InvalidInputError(f"{store_type.__name__} takes no option {unknown[0]!r}: give one of {', '.join(takes)}")
    return store_type(*args, **options)
