"""A Neo4j 5 server named by the environment: NEO4J_URI (required), NEO4J_USER,
NEO4J_PASSWORD, NEO4J_DATABASE. Neo4j cannot be installed on these machines, so it is
exercised only when NEO4J_URI is given.

Every ``new_store`` empties the database first, so only the newest store is isolated: do not
point NEO4J_URI at a database whose contents matter.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.errors import KGQAError
from engine.servers.base import Server, ServerUnavailable
from engine.stores.bolt import BoltStore

#: nodes deleted per transaction when emptying the database
CLEAR_BATCH = 10000
_CLEAR = "MATCH (n) WITH n LIMIT $batch DETACH DELETE n RETURN count(*) AS deleted"


class Neo4jServer(Server):
    def __init__(self, uri: str, user: str | None, password: str | None, database: str | None) -> None:
        self.uri, self.user, self.password, self.database = uri, user, password, database

    def new_store(self, name: str, **options: Any) -> BoltStore:
        """The configured database, emptied (``name`` is not used: one database serves all)."""
        store = BoltStore(self.uri, user=self.user, password=self.password, database=self.database, **options)
        while store._rows((_CLEAR, {"batch": CLEAR_BATCH}), write=True)[0][0]:
            pass
        return store

    def stop(self) -> None:
        """Nothing to stop: the server is not ours."""


def start(workdir: Path) -> Neo4jServer:
    uri = os.environ.get("NEO4J_URI")
    if not uri:
        raise ServerUnavailable("NEO4J_URI is not set (Neo4j is tested only against a server you name)")
    user, password, database = (os.environ.get(k) for k in ("NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE"))
    try:
        BoltStore(uri, user=user, password=password, database=database).close()
    except KGQAError as e:
        raise ServerUnavailable(f"NEO4J_URI cannot be used: {e}") from e
    return Neo4jServer(uri, user, password, database)
