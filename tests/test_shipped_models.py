"""The models the engine ships answer real held-out questions with no training: RoG's planner
(engine/models/adapters/rog-planner, a LoRA adapter of the offline model built by RoG's full
recipe) with RoG's defaults, on test-split questions of PathQuestion and MetaQA."""
from __future__ import annotations

import json

import pytest

from engine.methods import registry
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
