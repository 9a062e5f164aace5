"""The models the engine ships answer real held-out questions with no training, each a LoRA
adapter of the offline model in engine/models/adapters: RoG's planner (built by RoG's full
recipe) and ARG's generator (built by ARG's lora recipe), with their methods' defaults, on
test-split questions of PathQuestion and MetaQA."""
from __future__ import annotations

import json

import pytest

from engine.methods import registry
from engine.methods.arg.pipeline import SHIPPED_DEMOS, SHIPPED_GENERATOR, SHIPPED_K, ArgConfig
from engine.methods.metrics import evaluate
from engine.methods.rog.pipeline import SHIPPED_PLANNER, RogConfig
from engine.methods.run import run_method
from engine.methods.spec import Models
from engine.models.adapters import SHIPPED, adapter_base, shipped_adapter
from engine.models.transformers_lm import DEFAULT_LM
from engine.recipes.recipe import load_recipe
from loaders.datasets import select_questions
from loaders.load import load_files


def test_the_shipped_planner_is_the_full_recipes_adapter_of_the_offline_model():
    path = shipped_adapter(SHIPPED_PLANNER)
    assert path == SHIPPED / SHIPPED_PLANNER
    assert RogConfig().model == SHIPPED_PLANNER
    assert adapter_base(path) == DEFAULT_LM
    config = json.loads((path / "adapter_config.json").read_text())
    stage = load_recipe("rog", "full").stages[0]
    assert stage.settings["lora"] and (config["r"], config["lora_alpha"]) == (stage.settings["lora_r"], stage.settings["lora_alpha"])
    assert (path / "adapter_model.safetensors").stat().st_size < 16 * 2**20
    assert shipped_adapter("../adapters/rog-planner") is None and shipped_adapter("no-such-adapter") is None


def test_the_shipped_generator_is_the_lora_recipes_adapter_answering_as_that_recipe_does():
    path = shipped_adapter(SHIPPED_GENERATOR)
    assert path == SHIPPED / SHIPPED_GENERATOR and adapter_base(path) == DEFAULT_LM
    config = json.loads((path / "adapter_config.json").read_text())
    recipe = load_recipe("arg", "lora")
    [stage] = recipe.stages
    assert stage.settings["lora"] and (config["r"], config["lora_alpha"]) == (stage.settings["lora_r"], stage.settings["lora_alpha"])
    assert (path / "prompt_template.txt").read_text().strip() == stage.settings["prompt_template"]
    assert (path / "adapter_model.safetensors").stat().st_size < 16 * 2**20
    # ARG's defaults answer as the recipe's test split is answered; another model gets the paper's
    defaults = ArgConfig()
    assert defaults.model == SHIPPED_GENERATOR
    assert all((defaults.references, defaults.demonstrations) == (e.config["k"], e.config["n_demos"]) == (SHIPPED_K, SHIPPED_DEMOS)
               for e in recipe.evaluate)
    assert (ArgConfig(model=None).references, ArgConfig(model=None).demonstrations) == (20, 10)
    assert (ArgConfig(model=None, k=3, n_demos=0).references, ArgConfig(k=7).references) == (3, 7)


@pytest.mark.model
@pytest.mark.shared_data
@pytest.mark.parametrize(("dataset", "kb", "kb_format"), [
    ("pathquestion-2h", "pathquestion/2H-kb.txt", "tsv"),
    ("metaqa-2hop", "metaqa/kb.txt.gz", "metaqa"),
])
def test_arg_answers_held_out_questions_with_its_defaults(dataset, kb, kb_format, shared_data, make_store):
    store = make_store("oxigraph")
    load_files(store, [shared_data / kb], kb_format, progress=False)
    questions = select_questions(dataset, "test", sample=20, seed=1, data_directory=shared_data)
    records: list[dict] = []
    run_method(registry.get("arg").build(ArgConfig(), store, Models(progress=False)), questions, progress=False,
               on_record=records.append)
    # the lora recipe's validation split: EM 0.90 (PQ-2H) and 1.00 (MetaQA-2hop) on 50 questions each
    assert evaluate(records).overall.hits1 >= 0.8
    assert sum(r["arg"]["em"] for r in records) >= 16


@pytest.mark.model
@pytest.mark.shared_data
@pytest.mark.parametrize(("dataset", "kb", "kb_format"), [
    ("pathquestion-2h", "pathquestion/2H-kb.txt", "tsv"),
    ("metaqa-2hop", "metaqa/kb.txt.gz", "metaqa"),
])
def test_rog_answers_held_out_questions_with_its_defaults(dataset, kb, kb_format, shared_data, make_store):
    store = make_store("oxigraph")
    load_files(store, [shared_data / kb], kb_format, progress=False)
    questions = select_questions(dataset, "test", sample=20, seed=1, data_directory=shared_data)
    spec = registry.get("rog")
    records: list[dict] = []
    run_method(spec.build(RogConfig(), store, Models(progress=False)), questions, progress=False, on_record=records.append)
    # the full recipe's validation split: 0.99 (PQ-2H) and 0.99 (MetaQA-2hop) on 100 questions each
    assert evaluate(records).overall.hits1 >= 0.8
