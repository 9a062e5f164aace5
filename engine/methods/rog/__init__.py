"""RoG (Reasoning on Graphs): relation-path planning, grounding in the store, reasoning, training data.

See ``methods/RoG.md``; :mod:`engine.methods.rog.pipeline` runs the whole method, :mod:`engine.cli.rog`
adds ``kgqa rog run`` and ``kgqa rog export-training``.
"""
