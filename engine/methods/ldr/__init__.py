"""LDR (Xu et al., LLM-based Discriminative Reasoning): the LM only ever chooses from option
pools built in the store — subgraph search, constraint pruning, answer location.

See ``engine/methods/ldr/README.md`` for the commands and measured results.
"""
