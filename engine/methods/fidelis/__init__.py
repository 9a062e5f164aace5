"""FiDeLiS: Path-RAG retrieval over the store with an embedding index, and deductive-verification beam search."""
