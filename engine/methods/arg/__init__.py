"""ARG-KBQA: two-hop retrieval with a two-stage ranker, logical-form candidates and references,
few-shot generation, alignment and execution (``methods/ARG-KBQA.md``)."""
