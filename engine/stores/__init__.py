"""Store backends: embedded Oxigraph, SPARQL endpoints (Virtuoso), Bolt/Cypher (Neo4j)."""
