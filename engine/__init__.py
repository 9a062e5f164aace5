"""kgqa-engine: a graph-database-backed query engine for LLM-based KGQA."""
from engine.errors import KGQAError
from engine.model import Edge, Literal, Path, Triple
from engine.open import FREEBASE_NS, open_store
from engine.store import Store

__all__ = ["Edge", "FREEBASE_NS", "KGQAError", "Literal", "Path", "Store", "Triple", "open_store"]
