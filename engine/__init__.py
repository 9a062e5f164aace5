"""kgqa-engine: a graph-database-backed query engine for LLM-based KGQA."""
from engine.errors import KGQAError
from engine.graph import FREEBASE_NS, Edge, Literal, Path, Triple
from engine.open import open_store
from engine.store import Store

__all__ = ["Edge", "FREEBASE_NS", "KGQAError", "Literal", "Path", "Store", "Triple", "open_store"]
