"""The Cypher dialect: ``compiler`` (one builder per store operation, the read-only check,
FalkorDB's parameter header) and ``schema`` (indexes, constraints, bulk writes)."""
