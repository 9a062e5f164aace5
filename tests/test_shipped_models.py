"""The models the engine ships answer real held-out questions with no training, each a LoRA
adapter of the offline model in engine/models/adapters: RoG's planner (built by RoG's full
recipe), ARG's generator (built by ARG's lora recipe) and LDR's model (built by LDR's lora
recipe), with their methods' defaults, on test-split questions of PathQuestion and MetaQA."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.methods import registry
from engine.methods.arg.pipeline import SHIPPED_DEMOS, SHIPPED_GENERATOR, SHIPPED_K, ArgConfig
from engine.methods.ldr.pipeline import SHIPPED_MODEL, LdrConfig
from engine.methods.metrics import evaluate
from engine.methods.rog.pipeline import SHIPPED_PLANNER, RogConfig
from engine.methods.run import run_method
from engine.methods.spec import Models
from engine.models.adapters import SHIPPED, adapter_base, shipped_adapter
from engine.models.transformers_lm import DEFAULT_LM
from engine.recipes.recipe import Stage, load_recipe
from engine.store import Store
from loaders.datasets import select_questions
from loaders.load import load_files


#: the graphs and held-out question sets each shipped model answers with its method's defaults
HELD_OUT = pytest.mark.parametrize(("dataset", "kb", "kb_format"), [
    ("pathquestion-2h", "pathquestion/2H-kb.txt", "tsv"),
    ("metaqa-2hop", "metaqa/kb.txt.gz", "metaqa"),
])


def _shipped_adapter_of(name: str, stage: Stage) -> Path:
    """The shipped adapter ``name``, checked to be ``stage``'s adapter of the offline model, at most 16 MB."""
    path = shipped_adapter(name)
    assert path == SHIPPED / name and adapter_base(path) == DEFAULT_LM
    config = json.loads((path / "adapter_config.json").read_text())
    assert stage.settings["lora"] and (config["r"], config["lora_alpha"]) == (stage.settings["lora_r"], stage.settings["lora_alpha"])
    assert config["target_modules"] == sorted(config["target_modules"])  # as the recipe's rebuild writes it
    assert (path / "adapter_model.safetensors").stat().st_size < 16 * 2**20
    return path


#: held-out questions per set: each method's validation Hits@1 there is 0.93 or more, an untrained
#: model's 0.0, so ten tell the two apart (each is a real model's answer, the costliest tests here)
QUESTIONS = 20


@pytest.fixture(scope="module")
def held_out_graph(make_module_store, shared_data) -> Callable[[str, str], Store]:
    """``held_out_graph(kb, kb_format)``: an embedded store holding ``kb``, loaded once per module."""
    loaded: dict[str, Store] = {}

    def graph(kb: str, kb_format: str) -> Store:
        if kb not in loaded:
            loaded[kb] = make_module_store("oxigraph")
            load_files(loaded[kb], [shared_data / kb], kb_format, progress=False)
        return loaded[kb]

    return graph


def _records_with_defaults(method: str, config: Any, dataset: str, store: Store, shared_data: Path) -> list[dict]:
    """``method``'s records with ``config`` on held-out test-split questions of ``dataset`` over ``store``."""
    questions = select_questions(dataset, "test", sample=QUESTIONS, seed=1, data_directory=shared_data)
    records: list[dict] = []
    run_method(registry.get(method).build(config, store, Models(progress=False)), questions, progress=False,
               on_record=records.append)
    return records


def test_the_shipped_planner_is_the_full_recipes_adapter_of_the_offline_model():
    _shipped_adapter_of(SHIPPED_PLANNER, load_recipe("rog", "full").stages[0])
    assert RogConfig().model == SHIPPED_PLANNER
    assert shipped_adapter("../adapters/rog-planner") is None and shipped_adapter("no-such-adapter") is None


def test_the_shipped_generator_is_the_lora_recipes_adapter_answering_as_that_recipe_does():
    recipe = load_recipe("arg", "lora")
    [stage] = recipe.stages
    path = _shipped_adapter_of(SHIPPED_GENERATOR, stage)
    assert (path / "prompt_template.txt").read_text().strip() == stage.settings["prompt_template"]
    # ARG's defaults answer as the recipe's test split is answered; another model gets the paper's
    defaults = ArgConfig()
    assert defaults.model == SHIPPED_GENERATOR
    assert all((defaults.references, defaults.demonstrations) == (e.config["k"], e.config["n_demos"]) == (SHIPPED_K, SHIPPED_DEMOS)
               for e in recipe.evaluate)
    assert (ArgConfig(model=None).references, ArgConfig(model=None).demonstrations) == (20, 10)
    assert (ArgConfig(model=None, k=3, n_demos=0).references, ArgConfig(k=7).references) == (3, 7)


def test_the_shipped_ldr_model_is_the_lora_recipes_adapter_answering_as_that_recipe_does():
    recipe = load_recipe("ldr", "lora")
    [stage] = recipe.stages
    _shipped_adapter_of(SHIPPED_MODEL, stage)
    # the recipe answers with its model alone, for search and reasoning both, as the defaults do
    defaults = LdrConfig()
    assert defaults.model == SHIPPED_MODEL and defaults.reasoner is None
    assert all(set(e.config) == {"model"} for e in recipe.evaluate)


@pytest.mark.model
@pytest.mark.shared_data
@HELD_OUT
def test_arg_answers_held_out_questions_with_its_defaults(dataset, kb, kb_format, shared_data, held_out_graph):
    records = _records_with_defaults("arg", ArgConfig(), dataset, held_out_graph(kb, kb_format), shared_data)
    # the lora recipe's validation split: EM 0.90 (PQ-2H) and 1.00 (MetaQA-2hop) on 50 questions each
    assert evaluate(records).overall.hits1 >= 0.8
    assert sum(r["arg"]["em"] for r in records) >= 0.8 * QUESTIONS


@pytest.mark.model
@pytest.mark.shared_data
@HELD_OUT
@pytest.mark.parametrize(("method", "config"), [
    ("rog", RogConfig()),  # the full recipe's validation split: 0.99 (PQ-2H), 0.99 (MetaQA-2hop), 100 questions each
    ("ldr", LdrConfig()),  # the lora recipe's validation split: 0.93 (PQ-2H), 0.98 (MetaQA-2hop), 60 questions each
])
def test_rog_and_ldr_answer_held_out_questions_with_their_defaults(method, config, dataset, kb, kb_format, shared_data,
                                                                   held_out_graph):
    records = _records_with_defaults(method, config, dataset, held_out_graph(kb, kb_format), shared_data)
    assert evaluate(records).overall.hits1 >= 0.8
