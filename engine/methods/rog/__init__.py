"""RoG (Reasoning on Graphs): relation-path planning, grounding in the store, reasoning, training data.

See ``methods/RoG.md``; :mod:`engine.methods.rog.pipeline` runs the whole method.
"""
from engine.methods.rog.pipeline import RogConfig, build
from engine.methods.rog.training_data import training_samples
from engine.methods.spec import MethodSpec

SPEC = MethodSpec(
    name="rog",
    help="RoG: relation-path planning, grounding in the store, reasoning",
    config=RogConfig,
    build=build,
    training_samples=training_samples,
    paper="Luo et al., Reasoning on Graphs: Faithful and Interpretable Large Language Model Reasoning (ICLR 2024)",
)
