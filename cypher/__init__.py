"""The Cypher dialects: ``compiler`` (one method per store operation, Neo4j and FalkorDB),
``terms`` (relation quoting, literal keys), ``sexpr`` (S-expressions), ``schema`` (indexes,
constraints, bulk writes), ``readonly`` (the raw-query guard) and ``params`` (FalkorDB's
parameter header)."""
