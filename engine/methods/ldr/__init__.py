"""LDR (Xu et al., LLM-based Discriminative Reasoning): the LM only ever chooses from option
pools built in the store — subgraph search, constraint pruning, answer location.

The method's page, with its commands and current results: docs/methods/ldr.md.
"""
from engine.methods.ldr.pipeline import LdrConfig, build
from engine.methods.ldr.training_data import chain_samples
from engine.methods.spec import MethodSpec

SPEC = MethodSpec(
    name="ldr",
    help="LDR: discriminative search, constraint pruning and answer location over option pools",
    config=LdrConfig,
    build=build,
    training_samples=chain_samples,
    paper="Xu et al., LLM-based Discriminative Reasoning for Knowledge Graph Question Answering",
)
