"""EtD (Explore-then-Determine): a question-conditioned GNN explores the graph through the
store, then a language model picks the answer from a multiple-choice prompt.

Modules: ``config`` (the run options and training settings, without torch), ``exploration``
(batched expansion through ``Store.expand``), ``layers`` (Eq. 1–2), ``model`` (encodings, layers,
scorer, loss), ``training``, ``evidence`` (Algorithm 2), ``prompts``, ``determination``,
``pipeline``; its commands are in ``engine.cli.etd``. The method's page: docs/methods/etd.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.methods.etd.config import EtdConfig
from engine.methods.spec import MethodSpec, Models

if TYPE_CHECKING:
    from engine.methods.etd.pipeline import EtdMethod
    from engine.store import Store


def _build(config: EtdConfig, store: Store, models: Models) -> EtdMethod:
    from engine.methods.etd.pipeline import build  # torch loads here, not when the methods are listed

    return build(config, store, models)


SPEC = MethodSpec(
    name="etd",
    help="EtD: GNN exploration through the store, then LLM determination",
    config=EtdConfig,
    build=_build,
    paper="Liu et al., Explore then Determine: A GNN-LLM Synergy Framework for Reasoning over Knowledge Graph",
)
