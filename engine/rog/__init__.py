"""RoG (Reasoning on Graphs): relation-path planning, grounding in the store, reasoning, training data.

See ``methods/RoG.md``; :mod:`engine.rog.pipeline` runs the whole method, :mod:`engine.rog.cli`
adds ``kgqa rog run`` and ``kgqa rog export-training``.
"""
