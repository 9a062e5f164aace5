"""The dialects, by name: each compiles every operation of :mod:`engine.ops` to
``Compiled(text, params)`` (``compile(op)``), or raises UnsupportedOperationError naming the
operation it cannot do.

| name | compiler | used by |
|---|---|---|
| ``sparql`` | :class:`sparql.compiler.SparqlCompiler` | Oxigraph, any SPARQL 1.1 endpoint |
| ``virtuoso`` | :class:`sparql.virtuoso.VirtuosoCompiler` | Virtuoso |
| ``neo4j`` | :class:`cypher.compiler.CypherCompiler` | Neo4j 5 over Bolt |
| ``falkordb`` | :class:`cypher.compiler.FalkorDBCompiler` | FalkorDB over Bolt |

A SPARQL compiler takes the store's ``namespace`` and ``graph``; a Cypher one takes nothing.
"""
from __future__ import annotations

from collections.abc import Callable

from cypher.compiler import CypherCompiler, FalkorDBCompiler
from engine.ops import Compiler
from sparql.compiler import SparqlCompiler
from sparql.virtuoso import VirtuosoCompiler

DIALECTS: dict[str, Callable[..., Compiler]] = {
    "sparql": SparqlCompiler,
    "virtuoso": VirtuosoCompiler,
    "neo4j": CypherCompiler,
    "falkordb": FalkorDBCompiler,
}
