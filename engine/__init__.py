"""kgqa-engine: a graph-database-backed query engine for LLM-based KGQA."""
from engine.errors import KGQAError
from engine.graph import FREEBASE_NS, Edge, Literal, Path, Triple
from engine.identifiers import DEFAULT_LIMIT, UNBOUNDED
from engine.open import open_store
from engine.store import Store

__all__ = [
    "DEFAULT_LIMIT", "FREEBASE_NS", "UNBOUNDED", "Edge", "KGQAError", "Literal", "Path", "Store", "Triple", "open_store",
]
