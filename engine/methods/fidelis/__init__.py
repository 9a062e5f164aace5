"""FiDeLiS: Path-RAG over an embedding index of the store, and deductive-verification beam search.

The method's page: docs/methods/fidelis.md; :mod:`engine.methods.fidelis.pipeline` runs the method.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.methods.fidelis.config import FidelisConfig
from engine.methods.spec import MethodSpec, Models

if TYPE_CHECKING:
    from engine.methods.fidelis.pipeline import FidelisMethod
    from engine.store import Store


def _build(config: FidelisConfig, store: Store, models: Models) -> FidelisMethod:
    from engine.methods.fidelis.pipeline import build  # torch loads here, not when the methods are listed

    return build(config, store, models)


SPEC = MethodSpec(
    name="fidelis",
    help="FiDeLiS: Path-RAG over an embedding index, deductive-verification beam search",
    config=FidelisConfig,
    build=_build,
    paper="Sui et al., FiDeLiS: Faithful Reasoning in Large Language Model for Knowledge Graph Question Answering",
)
