"""EtD (Explore-then-Determine): a question-conditioned GNN explores the graph through the
store, then a language model picks the answer from a multiple-choice prompt.

Modules: ``exploration`` (batched expansion through ``Store.expand``), ``layers`` (Eq. 1–2),
``model`` (encodings, layers, scorer, loss), ``training``, ``evidence`` (Algorithm 2),
``prompts``, ``determination``, ``pipeline`` and ``cli``. See ``engine/methods/etd/README.md``.
"""
