"""Recipes: a method's results rebuilt end to end by one command (``kgqa reproduce``).

A recipe file (``engine/recipes/<method>.toml``, :mod:`engine.recipes.recipe`) names, per
recipe, the stores and datasets, the training samples drawn from each train split, every
training stage with its settings, and the validation and test sets. :mod:`engine.recipes.stores`
loads a store once and reuses it while its content is the recipe's; :mod:`engine.recipes.steps`
runs each step (export, train, evaluate) and marks it done with its hash, so a rerun resumes;
:mod:`engine.recipes.runner` puts them in order and writes ``results/<method>/<recipe>.json``;
:mod:`engine.recipes.report` turns those files into the docs' tables.
"""
