"""Recipes (``engine/recipes``): a recipe file is checked key by key, ``kgqa reproduce`` runs a
toy recipe end to end with the tiny local model and resumes what it finished, and ``kgqa
report`` regenerates the docs' results tables byte for byte from the committed results."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError, KGQAWarning
from engine.methods.registry import names
from engine.models import run_folder
from engine.recipes.recipe import QUICK_RECIPE, load_recipe, recipe_file
from engine.recipes.report import render, stale_results, write_report
from engine.recipes.runner import reproduce

ROOT = Path(__file__).resolve().parent.parent

KB = [
    ("Titanic", "directed_by", "James Cameron"),
    ("Avatar", "directed_by", "James Cameron"),
    ("Titanic", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "directed_by", "Christopher Nolan"),
    ("Avatar", "starred_actors", "Sam Worthington"),
    ("Heat", "directed_by", "Michael Mann"),
    ("Collateral", "directed_by", "Michael Mann"),
]
#: a MetaQA-format file of 20 questions: the run protocol's split gives 16 train, 2 val, 2 test
QUESTIONS = [f"who directed [{film}]\t{director}" for film, rel, director in KB if rel == "directed_by"] * 4


def _toy(tmp_path: Path, tiny: str, *, stage: str = "", evaluate: str = "") -> Path:
    """A recipe file for RoG over a toy KB, training the tiny model; ``stage`` and ``evaluate`` add lines."""
    (tmp_path / "kb.txt").write_text("".join(f"{s}|{r}|{o}\n" for s, r, o in KB))
    (tmp_path / "qa_dev.txt").write_text("\n".join(QUESTIONS) + "\n")
    path = tmp_path / "rog.toml"
    path.write_text(f"""
method = "rog"

[stores.toy]
files = ["kb.txt"]
format = "metaqa"

[recipes.toy]
description = "the tiny model on a toy KB"
config = {{ model = "{tiny}", prompt_tokens = 64 }}

[[recipes.toy.samples]]
dataset = "qa_dev.txt"
store = "toy"
name = "toy"

[[recipes.toy.stages]]
name = "planner"
kind = "lm"
mix = [{{ samples = "toy", tasks = ["planning"] }}]
base = "{tiny}"
epochs = 1
lr = 1e-3
batch_size = 4
seed = 0
{stage}

[recipes.toy.validate]
config = {{ model = "@planner", k = 2, answer_mode = "paths", max_hops = 1 }}
sets = [{{ dataset = "qa_dev.txt", store = "toy", name = "toy" }}]

[recipes.toy.evaluate]
config = {{ model = "@planner", k = 2, answer_mode = "paths", max_hops = 1 }}
sets = [{{ dataset = "qa_dev.txt", store = "toy", name = "toy" }}]
{evaluate}
""")
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny_lm import make_tiny_lm

    return make_tiny_lm(tmp_path_factory.mktemp("tiny-llama"))


# ----------------------------------------------------------------------------- checking a recipe file
def _error(path: Path, recipe: str = "toy") -> str:
    with pytest.raises(InvalidInputError) as e:
        load_recipe("rog", recipe, path)
    return str(e.value)


def test_an_unknown_stage_key_is_named_with_the_file(tmp_path, tiny):
    path = _toy(tmp_path, tiny, stage="epoch = 3")
    message = _error(path)
    assert str(path) in message and "recipes.toy.stages[0]" in message and "unknown key 'epoch'" in message


def test_a_recipe_file_that_is_not_toml_text_is_named(tmp_path, tiny):
    path = tmp_path / "recipes.toml"
    path.write_bytes(b"[recipes.toy]\ndescription = \"\xff\"\n")
    assert f"recipe file {path}: not UTF-8 text" in _error(path)
    path.write_text("[recipes.toy\n")
    assert f"recipe file {path}: not valid TOML" in _error(path)
    path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert f"recipe file {path}: not valid TOML: arrays or tables nested too deep" in _error(path)


def test_listing_a_recipe_file_checks_it(tmp_path, tiny, capsys):
    path = _toy(tmp_path, tiny)
    assert main(["reproduce", "rog", "--recipe-file", str(path), "--list"]) == 0
    assert capsys.readouterr().out == "toy\tthe tiny model on a toy KB\n"
    for text, says in (('method = "rog"\n', "missing key 'recipes'"), ('method = "rog"\n[recipes]\n', "recipes: no recipes"),
                       (path.read_text().replace('method = "rog"', 'method = "ldr"'), "the file is 'ldr''s, not 'rog''s"),
                       (path.read_text().replace("lr = 1e-3\n", ""), "missing key 'lr'")):
        path.write_text(text)
        assert main(["reproduce", "rog", "--recipe-file", str(path), "--list"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and str(path) in captured.err and says in captured.err


def test_a_missing_stage_field_is_named_with_the_file(tmp_path, tiny):
    path = _toy(tmp_path, tiny)
    path.write_text(path.read_text().replace("lr = 1e-3\n", ""))
    message = _error(path)
    assert str(path) in message and "recipes.toy.stages[0]" in message and "missing key 'lr'" in message


@pytest.mark.parametrize("change, where, what", [
    (("kind = \"lm\"", "kind = \"gnn\""), "recipes.toy.stages[0].kind", "unknown kind 'gnn'"),
    (("epochs = 1", "epochs = \"one\""), "recipes.toy.stages[0].epochs", "expected int"),
    (("samples = \"toy\"", "samples = \"other\""), "recipes.toy.stages[0].mix[0].samples", "no sample set 'other'"),
    (("\"@planner\"", "\"@nothing\""), "recipes.toy.validate.config.model", "names no earlier stage"),
    (("max_hops = 1 }", "beams = 1 }"), "recipes.toy.validate.config", "no option 'beams'"),
    (("max_hops = 1 }", "max_hops = 0 }"), "recipes.toy.validate.config", "option max_hops (--max-hops) = 0: use an integer"),
    (("epochs = 1", "epochs = 0"), "recipes.toy.stages[0]", "fine-tuning settings: epochs must be at least 1"),
    (("lr = 1e-3", "lr = nan"), "recipes.toy.stages[0]", "fine-tuning settings: lr must be a number"),
    (("store = \"toy\"\nname = \"toy\"", "store = \"elsewhere\"\nname = \"toy\""), "recipes.toy.samples[0].store", "unknown store 'elsewhere'"),
    (("dataset = \"qa_dev.txt\"\nstore = \"toy\"", "dataset = \"webqsp-fb15k237-chains\"\nstore = \"toy\""),
     "recipes.toy.samples[0].store", "is built with the store fb15k237, not 'toy'"),
    (("seed = 0\n", "seed = 0\nprecision = \"half\"\n"), "recipes.toy.stages[0].precision", "unknown precision 'half'"),
    (("seed = 0\n", "seed = 0\nschedule = \"bogus\"\n"), "recipes.toy.stages[0].schedule", "unknown schedule 'bogus': use one of linear, cosine"),
    (("[recipes.toy]\n", "[recipes.toy]\ndtype = \"bf16\"\n"), "recipes.toy.dtype", "unknown dtype 'bf16'"),
    # numbers that would fail only once their step starts, after the stores load
    (("seed = 0\n", "seed = 99999999999999999999\n"), "recipes.toy.stages[0].seed", "give a whole number from 0 to 4294967295"),
    (("seed = 0\n", "seed = -1\n"), "recipes.toy.stages[0].seed", "-1: give a whole number from 0 to"),
    (("name = \"toy\"\n", "name = \"toy\"\nsample = 0\n"), "recipes.toy.samples[0].sample", "0: give a whole number of at least 1"),
    (("tasks = [\"planning\"] }", "tasks = [\"planning\"], questions = -3 }"), "recipes.toy.stages[0].mix[0].questions",
     "-3: give a whole number of at least 1"),
    (("seed = 0\n", "seed = 0\nprompt_template = \"alpaca\"\n"), "recipes.toy.stages[0]", "unknown prompt template 'alpaca'"),
    (("seed = 0\n", "seed = 0\nprompt_template = \"Q: {prompt} as {\\\"json\\\": 1}\"\n"), "recipes.toy.stages[0]",
     "holds a brace field other than {prompt}"),
    # a name of a run's file or folder: a stage's folder is removed and made anew, so a name
    # that reached outside the run could delete the user's files
    (("name = \"planner\"", "name = \"../../../../victim\""), "recipes.toy.stages[0].name", "cannot name a stage"),
    (("name = \"planner\"", "name = \"..\""), "recipes.toy.stages[0].name", "cannot name a stage"),
    (("store = \"toy\"\nname = \"toy\"", "store = \"toy\"\nname = \"a/b\""), "recipes.toy.samples[0].name", "cannot name a sample set"),
    (("name = \"toy\" }]\n\n[recipes.toy.evaluate]", "name = \"x\\u0000y\" }]\n\n[recipes.toy.evaluate]"),
     "recipes.toy.validate.sets[0].name", "cannot name a set"),
    (("store = \"toy\"\nname = \"toy\"", "store = \"toy\"\nname = \"" + "n" * 101 + "\""), "recipes.toy.samples[0].name",
     "a name of 1 to 100 characters"),
])
def test_every_bad_value_is_named_with_its_key(tmp_path, tiny, change, where, what):
    path = _toy(tmp_path, tiny)
    text = path.read_text()
    assert change[0] in text
    path.write_text(text.replace(change[0], change[1], 1))
    message = _error(path)
    assert str(path) in message and where in message and what in message


def test_a_set_named_after_a_question_file_in_a_folder_is_asked_for_a_name(tmp_path, tiny):
    path = _toy(tmp_path, tiny)
    (tmp_path / "qs").mkdir()
    shutil.copy(tmp_path / "qa_dev.txt", tmp_path / "qs" / "qa.txt")
    path.write_text(path.read_text().replace('sets = [{ dataset = "qa_dev.txt", store = "toy", name = "toy" }]',
                                             'sets = [{ dataset = "qs/qa.txt", store = "toy" }]', 1))
    message = _error(path)
    assert "recipes.toy.validate.sets[0].dataset: 'qs/qa.txt' cannot name a set: its name defaults to its dataset" in message


def test_a_recipe_named_with_a_path_is_refused_before_anything_is_written(tmp_path, tiny, capsys):
    path = _toy(tmp_path, tiny)
    path.write_text(path.read_text().replace("recipes.toy", 'recipes."../../escaped"'))
    code = main(["reproduce", "rog", "--recipe-file", str(path), "--recipe", "../../escaped", "--workdir", str(tmp_path / "work"),
                 "--results", str(tmp_path / "results"), "--no-progress"])
    assert code == 2 and "'../../escaped' cannot name a recipe: rename it" in capsys.readouterr().err
    assert not (tmp_path / "work").exists() and not (tmp_path / "results").exists() and not (tmp_path / "escaped.json").exists()


def test_a_base_model_that_is_not_there_is_named_before_any_store_loads(tmp_path, tiny, capsys):
    path = _toy(tmp_path, tiny)
    path.write_text(path.read_text().replace(f'base = "{tiny}"', f'base = "{tmp_path}/no-such-model"'))
    code = main(["reproduce", "rog", "--recipe-file", str(path), "--recipe", "toy", "--workdir", str(tmp_path / "work"),
                 "--results", str(tmp_path / "results"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"the base model of stage 'planner' of {path} '{tmp_path}/no-such-model': there is no" in err
    assert not (tmp_path / "work").exists() and not (tmp_path / "results").exists()


ETD_STAGE = """
[[recipes.toy.stages]]
name = "gnn"
kind = "etd"
dataset = "qa_dev.txt"
store = "toy"
paper_config = "metaqa-1hop"
epochs = 1
lr = 1e-3
seed = 0
"""


@pytest.mark.parametrize("change, where, what", [
    (("paper_config = \"metaqa-1hop\"\n", ""), "recipes.toy.stages[1].dataset", "no EtD paper settings (L, K) for"),
    (("\"metaqa-1hop\"", "\"metaqa-9hop\""), "recipes.toy.stages[1].paper_config", "no EtD paper settings (L, K) for 'metaqa-9hop': name them with paper_config"),
    (("epochs = 1", "epochs = 0"), "recipes.toy.stages[1]", "EtD training settings: epochs must be an integer of at least 1"),
    (("lr = 1e-3", "lr = nan"), "recipes.toy.stages[1]", "EtD training settings: lr must be a number"),
    (("seed = 0", "seed = 0\nmax_frontier = -1"), "recipes.toy.stages[1]", "max_frontier must be an integer of at least 1"),
])
def test_an_etd_stages_settings_are_checked_when_the_recipe_is_read(tmp_path, tiny, change, where, what):
    path = _toy(tmp_path, tiny)
    toy = path.read_text()
    path.write_text(toy + ETD_STAGE)
    assert load_recipe("rog", "toy", path).stages[1].settings["paper_config"] == "metaqa-1hop"
    assert change[0] in ETD_STAGE
    path.write_text(toy + ETD_STAGE.replace(change[0], change[1], 1))
    message = _error(path)
    assert str(path) in message and where in message and what in message


EXTENDED = """
[recipes.derived]
description = "the toy recipe trained longer"
extends = "toy"

[[recipes.derived.stages]]
name = "planner"
epochs = 2
"""


def test_a_recipe_that_extends_another_is_that_one_with_its_changes_written_out(tmp_path, tiny):
    path = _toy(tmp_path, tiny)
    toy = path.read_text()
    path.write_text(toy + EXTENDED)
    derived = load_recipe("rog", "derived", path)
    # the same recipe written out whole: the toy recipe renamed, with its description and epochs changed
    written = tmp_path / "written.toml"
    whole = toy.replace("recipes.toy", "recipes.derived").replace("the tiny model on a toy KB", "the toy recipe trained longer")
    written.write_text(whole.replace("epochs = 1", "epochs = 2"))
    assert derived == dataclasses.replace(load_recipe("rog", "derived", written), file=path)
    base = load_recipe("rog", "toy", path)
    assert derived.stages[0].settings["epochs"] == 2 and base.stages[0].settings["epochs"] == 1
    assert derived.stages[0].settings["lr"] == base.stages[0].settings["lr"] and derived.samples == base.samples
    assert derived.hash != base.hash


def test_a_sample_set_of_an_extending_recipe_changes_the_one_of_its_name_or_is_added(tmp_path, tiny):
    path = _toy(tmp_path, tiny)
    path.write_text(path.read_text() + EXTENDED + '''
[[recipes.derived.samples]]
name = "toy"
sample = 8

[[recipes.derived.samples]]
dataset = "qa_dev.txt"
store = "toy"
name = "more"
seed = 1
''')
    derived = load_recipe("rog", "derived", path)
    assert [(s.name, s.sample, s.seed) for s in derived.samples] == [("toy", 8, 0), ("more", None, 1)]
    assert derived.samples[0].dataset == load_recipe("rog", "toy", path).samples[0].dataset


def test_a_stage_of_an_extending_recipe_with_a_new_name_is_added(tmp_path, tiny):
    path = _toy(tmp_path, tiny)
    path.write_text(path.read_text() + EXTENDED.replace('name = "planner"\nepochs = 2', '''name = "again"
kind = "lm"
mix = [{ samples = "toy" }]
base = "@planner"
epochs = 1
lr = 1e-4
batch_size = 4
seed = 0'''))
    derived = load_recipe("rog", "derived", path)
    assert [s.name for s in derived.stages] == ["planner", "again"] and derived.stages[1].settings["base"] == "@planner"


@pytest.mark.parametrize("change, where, what", [
    (('extends = "toy"', 'extends = "other"'), "recipes.derived.extends", "no other recipe 'other' to extend: use one of toy"),
    (('extends = "toy"', 'extends = "derived"'), "recipes.derived.extends", "no other recipe 'derived'"),
    (('description = "the toy recipe trained longer"\n', ""), "recipes.derived", "missing key 'description': say how"),
    (('name = "planner"\n', ""), "recipes.derived.stages[0]", "names the stage it changes or adds"),
    (("epochs = 2", "epochs = 2\nepoch = 3"), "recipes.derived.stages[0]", "unknown key 'epoch'"),
])
def test_a_bad_extending_recipe_is_named_with_its_key(tmp_path, tiny, change, where, what):
    path = _toy(tmp_path, tiny)
    assert change[0] in EXTENDED
    path.write_text(path.read_text() + EXTENDED.replace(change[0], change[1], 1))
    message = _error(path, "derived")
    assert str(path) in message and where in message and what in message


def test_recipes_that_extend_each_other_in_a_circle_are_refused(tmp_path, tiny):
    path = _toy(tmp_path, tiny)
    circle = EXTENDED + EXTENDED.replace("derived", "second").replace('extends = "toy"', 'extends = "derived"')
    path.write_text(path.read_text() + circle.replace('extends = "toy"', 'extends = "second"'))
    with pytest.raises(InvalidInputError, match="in a circle: derived → second → derived"):
        load_recipe("rog", "derived", path)


def test_a_dataset_built_beside_a_stores_slice_is_taken_with_that_store(tmp_path, tiny):
    path = _toy(tmp_path, tiny)
    path.write_text(path.read_text().replace('dataset = "qa_dev.txt"\nstore = "toy"', 'dataset = "webqsp-fb15k237-chains"\nstore = "fb15k237"'))
    recipe = load_recipe("rog", "toy", path)
    assert (recipe.samples[0].dataset, recipe.samples[0].store) == ("webqsp-fb15k237-chains", "fb15k237")
    assert recipe.stores["fb15k237"].builds == "webqsp-fb15k237"


def test_every_method_has_a_full_and_a_quick_recipe_that_check():
    for method in names():
        for name in ("full", QUICK_RECIPE):
            recipe = load_recipe(method, name, recipe_file(method))
            assert recipe.evaluate and recipe.hash


# ----------------------------------------------------------------------------- running and resuming
def _steps(results: dict) -> dict[str, bool]:
    return {s["step"]: s["resumed"] for s in [*results["steps"], *results["validation"].values(), *results["evaluation"].values()]}


def test_reproduce_runs_a_recipe_and_a_second_run_resumes_every_finished_step(tmp_path, tiny, monkeypatch, capsys):
    path = _toy(tmp_path, tiny)
    work, results_dir = tmp_path / "work", tmp_path / "results"
    first = reproduce("rog", "toy", recipe_path=path, workdir=work, results_dir=results_dir, device="cpu", progress=False)
    assert not any(_steps(first).values())
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kgqa reproduce: ")]
    # each step says when it starts and how long it took
    assert [line.split(": ")[1].removesuffix(" …") for line in said] == [s for s in _steps(first) for _ in range(2)]
    assert all(line.endswith(" …") for line in said[::2]) and all(line.endswith(" s") for line in said[1::2])
    assert set(_steps(first)) == {"store:toy", "samples:toy", "stage:planner", "validate:toy", "evaluate:toy"}
    written = json.loads((results_dir / "rog" / "toy.json").read_text())
    assert written["recipe_hash"] == load_recipe("rog", "toy", path).hash and written["device"] == "cpu"
    assert written["machine"]["cores"] >= 1 and written["steps_seconds"] > 0
    # every step but a store's records the machine it ran on: this run's
    assert [s["step"] for s in written["steps"] if "machine" not in s] == ["store:toy"]
    assert all(s["machine"] == written["machine"] for s in [*written["steps"][1:], *written["evaluation"].values()])
    # every step's CPU seconds, and their sum: training a model costs some
    every = [*written["steps"], *written["validation"].values(), *written["evaluation"].values()]
    assert all(isinstance(s["cpu_seconds"], float) and s["cpu_seconds"] >= 0 for s in every)
    assert written["steps_cpu_seconds"] == pytest.approx(sum(s["cpu_seconds"] for s in every), abs=0.1)
    assert next(s for s in every if s["step"] == "stage:planner")["cpu_seconds"] > 0 and written["cpu_seconds"] > 0
    test = written["evaluation"]["toy"]
    assert test["split"] == "test" and test["questions"] == 2 and written["validation"]["toy"]["split"] == "val"
    # the tokens the planner read (its prompts) and wrote (its plans), per question
    assert test["tokens_per_question"]["prompt_tokens"] > 0 and test["tokens_per_question"]["completion_tokens"] > 0
    assert set(test["scores"]["overall"]["metrics"]) >= {"hits1", "hits1_any", "rog_hit", "macro_f1"}
    # two grounded one-hop plans: every relation of the topic film, so its director is among the path ends
    assert test["scores"]["overall"]["metrics"]["hits1_any"]["value"] == 1.0
    assert (work / "runs" / "rog" / "toy" / "stages" / "planner" / "config.json").is_file()

    again = reproduce("rog", "toy", recipe_path=path, workdir=work, results_dir=results_dir, device="cpu", progress=False)
    assert all(_steps(again).values())
    said = capsys.readouterr().err
    assert "kgqa reproduce: store:toy: loaded before, reused (" in said and "samples:toy: done before, resumed (" in said
    assert again["evaluation"] == {**first["evaluation"], "toy": {**first["evaluation"]["toy"], "resumed": True}}
    # a resumed step's seconds are those it took when it ran
    assert again["steps"] == [{**s, "resumed": True} for s in first["steps"]]
    assert again["steps_cpu_seconds"] == first["steps_cpu_seconds"]
    # a step resumed from a run on another machine says where it ran, and the report names it
    stage_marker = work / "runs" / "rog" / "toy" / "stages" / "planner.done.json"
    elsewhere = {**first["machine"], "cpu": "Another CPU", "bf16_instructions": ["amx_bf16"], "cores": 16}
    record = json.loads(stage_marker.read_text())
    # ... and that it trained in bf16 there: the steps table shows the stage's precision, the run line the answering dtype
    record["report"]["training"]["device"] = "cpu (bf16)"
    stage_marker.write_text(json.dumps({**record, "machine": elsewhere}))
    moved = reproduce("rog", "toy", recipe_path=path, workdir=work, results_dir=results_dir, device="cpu", progress=False)
    assert [s["machine"] for s in moved["steps"][1:]] == [first["machine"], elsewhere]
    assert main(["report", "--results", str(results_dir), "--out", str(tmp_path / "generated")]) == 0
    page = (tmp_path / "generated" / "results-rog.md").read_text()
    assert "Resumed from a run on 16 cores of Another CPU (with amx_bf16): stage:planner." in page
    assert "did not record its machine" not in page
    assert "device cpu, answering in float32;" in page
    assert re.search(r"^\| stage:planner \| lm \| [^|]+ \| [^|]+ \| cpu \(bf16\) \| yes \|$", page, re.M)

    # another setting of the stage: the stage and what reads its model run again, the samples do not
    changed = _toy(tmp_path, tiny, stage="warmup = 0.0")
    third = reproduce("rog", "toy", recipe_path=changed, workdir=work, results_dir=results_dir, device="cpu", progress=False)
    assert _steps(third) == {"store:toy": True, "samples:toy": True, "stage:planner": False, "validate:toy": False,
                             "evaluate:toy": False}

    # --rerun evaluate: only the test sets answer again (after a change to the answering code)
    fourth = reproduce("rog", "toy", recipe_path=changed, workdir=work, results_dir=results_dir, device="cpu", progress=False,
                       rerun=["evaluate"])
    assert _steps(fourth) == {"store:toy": True, "samples:toy": True, "stage:planner": True, "validate:toy": True,
                              "evaluate:toy": False}
    assert fourth["evaluation"]["toy"]["scores"] == third["evaluation"]["toy"]["scores"]
    with pytest.raises(InvalidInputError, match="stage"):
        reproduce("rog", "toy", recipe_path=changed, workdir=work, results_dir=results_dir, device="cpu", progress=False,
                  rerun=["stage"])

    # answering in bfloat16 (the recipe's dtype): the sets answer again, the trained model is kept
    from engine.models import device

    monkeypatch.setattr(device, "native_bf16", lambda name: True)  # elsewhere float32 (the next test)
    changed.write_text(changed.read_text().replace("[recipes.toy]\n", "[recipes.toy]\ndtype = \"bfloat16\"\n", 1))
    fifth = reproduce("rog", "toy", recipe_path=changed, workdir=work, results_dir=results_dir, device="cpu", progress=False)
    assert _steps(fifth) == {"store:toy": True, "samples:toy": True, "stage:planner": True, "validate:toy": False,
                             "evaluate:toy": False}
    assert fifth["dtype"] == "bfloat16"


def test_a_stage_stopped_part_way_goes_on_from_its_checkpoint_and_counts_the_time_before(tmp_path, tiny, monkeypatch):
    import functools

    import engine.models.sft as sft

    path = _toy(tmp_path, tiny)
    path.write_text(path.read_text().replace("batch_size = 4", "batch_size = 1"))  # several batches to stop between
    work, results_dir = tmp_path / "work", tmp_path / "results"
    calls, real_loss, real_train = [0], sft.target_loss, sft.train

    def stop_at_the_fourth_batch(*args):
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt
        return real_loss(*args)

    monkeypatch.setattr(sft, "train", functools.partial(real_train, checkpoint_seconds=0))  # a checkpoint every batch
    monkeypatch.setattr(sft, "target_loss", stop_at_the_fourth_batch)
    with pytest.raises(KeyboardInterrupt):
        reproduce("rog", "toy", recipe_path=path, workdir=work, results_dir=results_dir, device="cpu", progress=False)
    stage = work / "runs" / "rog" / "toy" / "stages" / "planner"
    state = json.loads((run_folder.find_checkpoint(stage) / "state.json").read_text())
    assert state["part"]["batches"] == 3 and state["cpu_seconds"] > 0

    monkeypatch.setattr(sft, "target_loss", real_loss)
    results = reproduce("rog", "toy", recipe_path=path, workdir=work, results_dir=results_dir, device="cpu", progress=False)
    planner = next(s for s in results["steps"] if s["step"] == "stage:planner")
    assert planner["continued_from_checkpoint"] and not planner["resumed"]
    assert planner["seconds_before_resuming"] == pytest.approx(state["part"]["seconds"], abs=0.1)
    assert planner["cpu_seconds_before_resuming"] == round(state["cpu_seconds"], 1)
    assert planner["seconds"] >= planner["seconds_before_resuming"]
    assert planner["cpu_seconds"] > planner["cpu_seconds_before_resuming"]
    assert planner["training"]["epochs"] == 1 and run_folder.find_checkpoint(stage) is None  # trained to its end


def _predictions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_method_run_with_a_recipe_answers_as_the_recipes_run_answers_its_test_set(tmp_path, tiny, capsys):
    path = _toy(tmp_path, tiny)
    work = tmp_path / "work"
    reproduce("rog", "toy", recipe_path=path, workdir=work, results_dir=tmp_path / "results", device="cpu", progress=False)
    recipe_run = _predictions(work / "runs" / "rog" / "toy" / "evaluate" / "toy.jsonl")
    argv = ["rog", "run", "--recipe", "toy", "--recipe-file", str(path), "--workdir", str(work), "--device", "cpu", "--no-progress"]

    def answered(*more: str) -> list[dict]:
        out = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}.jsonl"
        assert main([*argv, *more, "--out", str(out)]) == 0
        return _predictions(out)

    def same(a: list[dict], b: list[dict]) -> bool:
        return [(r["id"], r["prediction"], r["rog"]["plans"]) for r in a] == [(r["id"], r["prediction"], r["rog"]["plans"]) for r in b]

    # the recipe's own set: its store and question file, the planner its run trained, its options
    assert same(answered("--dataset", "toy"), recipe_run)
    # a question file of one's own standing for that set: the same questions get the same answers
    assert same(answered("--dataset", str(tmp_path / "qa_dev.txt"), "--recipe-set", "toy"), recipe_run)
    # an option given on the command line wins over the recipe's (two plans a question there)
    assert max(len(r["rog"]["plans"]) for r in recipe_run) == 2
    assert all(len(r["rog"]["plans"]) == 1 for r in answered("--dataset", "toy", "--plans", "1"))

    capsys.readouterr()
    assert main([*argv, "--dataset", str(tmp_path / "qa_dev.txt")]) == 2
    assert "give --recipe-set SET" in capsys.readouterr().err
    assert main([*argv, "--dataset", "toy", "--workdir", str(tmp_path / "elsewhere")]) == 2
    assert "has not trained stage 'planner'" in capsys.readouterr().err
    assert main(["rog", "run", "--dataset", "toy", "--recipe-set", "toy"]) == 2
    assert "go with --recipe NAME" in capsys.readouterr().err

    # the recipe's store is opened only when its load finished: a load cut short is refused
    done = work / "stores" / "toy.done.json"
    finished = done.read_text()
    done.write_text(json.dumps({**json.loads(finished), "state": "loading"}))
    assert main([*argv, "--dataset", "toy"]) == 2
    assert "was not loaded to the end" in capsys.readouterr().err
    done.unlink()
    assert main([*argv, "--dataset", "toy"]) == 2
    assert "was not loaded by `kgqa reproduce`" in capsys.readouterr().err
    done.write_text(finished)
    shutil.move(work / "stores" / "toy", tmp_path / "moved")
    assert main([*argv, "--dataset", "toy"]) == 2
    assert f"`kgqa reproduce rog --recipe toy --workdir {work}`, or give --store" in capsys.readouterr().err
    assert same(answered("--dataset", "toy", "--store", str(tmp_path / "moved")), recipe_run)


def test_a_recipe_answers_in_its_own_dtype_else_bfloat16_on_a_gpu_only(tmp_path, tiny, monkeypatch):
    from engine.models import device
    from engine.recipes.steps import answering_dtype

    plain = load_recipe("rog", "toy", _toy(tmp_path, tiny))
    monkeypatch.setattr(device, "native_bf16", lambda name: True)
    assert (answering_dtype(plain, "cpu"), answering_dtype(plain, "cuda:0")) == (None, "bfloat16")
    assert answering_dtype(dataclasses.replace(plain, dtype="float32"), "cuda") == "float32"
    assert answering_dtype(load_recipe("ldr", "full"), "cpu") == "bfloat16"
    # a device without bfloat16 arithmetic converts it in software, slower than float32: the model's own, said
    monkeypatch.setattr(device, "native_bf16", lambda name: False)
    with pytest.warns(KGQAWarning, match="ldr's full recipe answers in bfloat16, but this CPU has no bfloat16 arithmetic"):
        assert answering_dtype(load_recipe("ldr", "full"), "cpu") is None
    assert answering_dtype(plain, "cuda:0") is None and answering_dtype(dataclasses.replace(plain, dtype="float32"), "cpu") == "float32"


def test_a_store_loaded_from_other_data_is_loaded_again(tmp_path, tiny):
    from engine.recipes.stores import ensure_store

    recipe = load_recipe("rog", "toy", _toy(tmp_path, tiny))
    first = ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False)
    assert not first.reused and first.triples == len(KB)
    assert ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False).reused
    (tmp_path / "kb.txt").write_text("Heat|directed_by|Michael Mann\n")
    again = ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False)
    assert not again.reused and again.triples == 1 and again.content != first.content
    (tmp_path / "work" / "stores" / "toy.done.json").write_text('{"hash": "cut sh')  # a marker's write cut short
    reloaded = ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False)
    assert not reloaded.reused and reloaded.content == again.content
    assert ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False).reused


def test_a_store_marker_that_says_done_but_records_no_content_loads_the_store_again(tmp_path, tiny):
    from engine.recipes.stores import ensure_store

    recipe = load_recipe("rog", "toy", _toy(tmp_path, tiny))
    first = ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False)
    done = tmp_path / "work" / "stores" / "toy.done.json"
    record = json.loads(done.read_text())
    done.write_text(json.dumps({"hash": record["hash"], "state": "done"}))  # damaged by hand: no content, no seconds
    again = ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False)
    assert not again.reused and again.content == first.content
    assert json.loads(done.read_text())["content"] == first.content


@pytest.mark.parametrize("damaged", ['{"hash": "h", "state": "do', '[1, 2]', '{"hash": "h", "state": "done"}',
                                     '{"hash": "h", "state": "done", "seconds": "5", "device": "cpu", "report": {}}', "\udcff"])
def test_a_step_marker_cut_short_or_damaged_runs_the_step_again(tmp_path, damaged):
    """A finished step is known by its marker alone: one that cannot be read, or lacks what a
    resumed step reports, is not trusted, and the step runs again and writes it whole."""
    from engine.recipes.steps import Context, _run_step

    output = tmp_path / "samples" / "toy.jsonl"
    output.parent.mkdir()
    marker = output.with_name("toy.jsonl.done.json")
    if damaged == "\udcff":
        marker.write_bytes(b"\xff\xfe{")
    else:
        marker.write_text(damaged)
    ctx = Context(None, None, tmp_path, {}, "cpu", None, machine={"cpu": "test"})
    ran = []
    report = _run_step(ctx, "samples:toy", "samples", output, "h", lambda: ran.append(1) or {"questions": 3})
    assert ran == [1] and report["resumed"] is False and report["questions"] == 3
    record = json.loads(marker.read_text())
    assert record["state"] == "done" and record["hash"] == "h" and record["report"] == {"questions": 3}
    assert not marker.with_name(marker.name + ".part").exists()
    resumed = _run_step(ctx, "samples:toy", "samples", output, "h", lambda: ran.append(2) or {})
    assert ran == [1] and resumed["resumed"] is True and resumed["questions"] == 3


def test_a_folder_reproduce_did_not_load_is_left_alone(tmp_path, tiny):
    from engine.recipes.stores import ensure_store

    recipe = load_recipe("rog", "toy", _toy(tmp_path, tiny))
    (tmp_path / "work" / "stores" / "toy").mkdir(parents=True)
    with pytest.raises(InvalidInputError, match="was not loaded by `kgqa reproduce`"):
        ensure_store(recipe.stores["toy"], tmp_path / "work", progress=False)
    assert (tmp_path / "work" / "stores" / "toy").is_dir()


# ----------------------------------------------------------------------------- report
def test_report_tables_are_the_committed_results_byte_for_byte(tmp_path):
    """The docs' results tables are generated from results/ and committed: regenerate and compare."""
    pages = render(ROOT / "results")
    for name, text in pages.items():
        committed = ROOT / "docs" / "generated" / name
        assert committed.is_file(), f"{committed} is missing: run `kgqa report` and commit it"
        assert committed.read_text(encoding="utf-8") == text, f"{committed} differs from results/: run `kgqa report`"
    assert main(["report", "--check", "--results", str(ROOT / "results"), "--out", str(ROOT / "docs" / "generated")]) == 0


def test_report_shows_every_set_and_convention_of_a_results_file(tmp_path, tiny, capsys):
    path = _toy(tmp_path, tiny)
    reproduce("rog", "toy", recipe_path=path, workdir=tmp_path / "work", results_dir=tmp_path / "results", device="cpu",
              progress=False)
    out = tmp_path / "generated"
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    page = (out / "results-rog.md").read_text()
    assert "### Recipe `toy`" in page and "#### Test split" in page and "#### Validation split" in page
    assert "| set | n | Hits@1 | Hits@1-any | RoG Hit |" in page and "| toy | 2 |" in page
    assert "| stage:planner | lm |" in page and "| step | kind | seconds | CPU seconds | device | resumed |" in page
    assert "Test split, the method's own measures (its summary of each run):" in page
    assert "| measure | toy |" in page and "| `plan_mode` | grounded |" in page
    everything = (out / "results-all.md").read_text()
    assert "| toy | rog | toy | 2 |" in everything
    written = json.loads((tmp_path / "results" / "rog" / "toy.json").read_text())
    tokens = written["evaluation"]["toy"]["tokens_per_question"]
    assert f"| {tokens['prompt_tokens']:.0f} / {tokens['completion_tokens']:.0f} |" in everything
    # what the recipe cost: its wall seconds, of which training, and its CPU seconds, all recorded
    training = next(s["seconds"] for s in written["steps"] if s["step"] == "stage:planner")
    from engine.recipes.report import _cores
    assert (f"| rog | toy | cpu, answering in float32 | {_cores(written['machine'])} | "
            f"{written['steps_seconds']:,.0f} | {training:,.0f} | {written['steps_cpu_seconds']:,.0f} |") in everything
    assert write_report(tmp_path / "results", out, check=True) == []
    assert "Resumed from" not in page  # every step ran in this run
    (out / "results-rog.md").write_text(page + "typed by hand\n")
    assert write_report(tmp_path / "results", out, check=True) == ["results-rog.md"]
    # a step resumed from a run by an older engine, which did not record its machine
    for s in written["steps"]:
        if s["step"] == "stage:planner":
            del s["machine"]
            s["resumed"] = True
    (tmp_path / "results" / "rog" / "toy.json").write_text(json.dumps(written))
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    assert "Resumed from an earlier run that did not record its machine: stage:planner." in (out / "results-rog.md").read_text()


def test_report_refuses_a_folder_without_results_files(tmp_path, capsys):
    for folder in (tmp_path / "absent", tmp_path):
        assert main(["report", "--results", str(folder), "--out", str(tmp_path / "generated")]) == 2
        assert f"no results files (<method>/<recipe>.json) in {folder}" in capsys.readouterr().err
    assert not (tmp_path / "generated").exists()


def test_report_refuses_a_folder_that_is_no_methods_and_reads_past_datasets(tmp_path, capsys):
    results, out = _committed_results(tmp_path, lambda d: None), tmp_path / "generated"
    (results / "datasets").mkdir()
    (results / "datasets" / "webqsp-fb15k237.json").write_text((ROOT / "results" / "datasets" / "webqsp-fb15k237.json").read_text())
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(render(ROOT / "results"))
    capsys.readouterr()
    # a method's results under a name that is no method's (a copy kept aside, a misspelt method)
    (results / "rog-old").mkdir()
    data = json.loads((results / "rog" / "quick.json").read_text())
    (results / "rog-old" / "quick.json").write_text(json.dumps(dict(data, method="rog-old")))
    for check in ([], ["--check"]):
        assert main(["report", "--results", str(results), "--out", str(tmp_path / "again"), *check]) == 2
        err = capsys.readouterr().err
        assert f"{results / 'rog-old'}: not a method's folder" in err and "rename it after the method" in err and "or remove it" in err
    assert not (tmp_path / "again").exists()


def test_report_check_names_a_results_file_whose_recipe_changed_or_went(tmp_path, tiny, capsys):
    path = _toy(tmp_path, tiny)
    results, out = tmp_path / "results", tmp_path / "generated"
    reproduce("rog", "toy", recipe_path=path, workdir=tmp_path / "work", results_dir=results, device="cpu", progress=False)
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert stale_results(results) == [] and main(["report", "--check", "--results", str(results), "--out", str(out)]) == 0
    text = path.read_text()
    # the description is prose outside the hash: reworded, the results stand and the page shows the new words
    path.write_text(text.replace("the tiny model on a toy KB", "the tiny model on a toy KB, described anew"))
    assert stale_results(results) == []
    assert "the tiny model on a toy KB, described anew" in render(results)["results-rog.md"]
    # a setting changed: the results no longer say what the recipe gives, and the page keeps the run's words
    path.write_text(text.replace("the tiny model on a toy KB", "the tiny model on a toy KB, described anew").replace("epochs = 1", "epochs = 2"))
    page = render(results)["results-rog.md"]
    assert "the tiny model on a toy KB\n" in page and "described anew" not in page
    [line] = stale_results(results)
    assert line.startswith(str(results / "rog" / "toy.json")) and "changed since this run" in line
    assert f"kgqa reproduce rog --recipe toy --recipe-file {path}`" in line
    with pytest.raises(SystemExit, match="1 results file"):
        main(["report", "--check", "--results", str(results), "--out", str(out)])
    assert "changed since this run" in capsys.readouterr().err
    path.write_text(text.replace("recipes.toy", "recipes.other"))
    [line] = stale_results(results)
    assert "has no valid recipe 'toy'" in line
    path.unlink()
    [line] = stale_results(results)
    assert line.endswith(f"its recipe file {path} is not here")


def _committed_results(tmp_path: Path, change) -> Path:
    """A copy of RoG's committed quick results, changed by ``change(data)``, alone in a results folder."""
    data = json.loads((ROOT / "results" / "rog" / "quick.json").read_text())
    change(data)
    (tmp_path / "results" / "rog").mkdir(parents=True)
    (tmp_path / "results" / "rog" / "quick.json").write_text(json.dumps(data))
    return tmp_path / "results"


def _first_run(data):
    return next(iter(data["evaluation"].values()))


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(evaluation=[]), "evaluation: expected an object, not []"),
    (lambda d: d.update(evaluation=None), "evaluation: expected an object, not null"),
    (lambda d: d.update(method=5), "method: expected a string, not 5"),
    (lambda d: d.update(method="ldr"), "method 'ldr' is not 'rog', which its place names"),
    (lambda d: d.update(recipe="../full"), "recipe '../full' is not 'quick', which its place names"),
    (lambda d: d.update(steps="abc"), 'steps: expected a list or null, not "abc"'),
    (lambda d: d.update(machine=[1]), "machine: expected an object or null, not [1]"),
    (lambda d: d.update(recipe_file=5), "recipe_file: expected a string or null, not 5"),
    (lambda d: d["steps"][0].update(seconds="12"), 'steps[0].seconds: expected a number, not "12"'),
    (lambda d: _first_run(d).pop("scores"), "evaluation.metaqa-1hop.scores: expected an object, not null"),
    (lambda d: _first_run(d)["scores"]["overall"]["metrics"]["hits1"].update(value="0.9"),
     'evaluation.metaqa-1hop.scores.overall.metrics.hits1.value: expected a number or null, not "0.9"'),
    (lambda d: _first_run(d)["scores"]["hops"].update({"9": 5}), "evaluation.metaqa-1hop.scores.hops.9: expected an object, not 5"),
    (lambda d: _first_run(d)["seconds_per_question"].update(store="fast"),
     'evaluation.metaqa-1hop.seconds_per_question.store: expected a number or null, not "fast"'),
])
def test_report_names_the_key_of_a_results_file_of_the_wrong_shape(tmp_path, capsys, change, says):
    results = _committed_results(tmp_path, change)
    for check in ([], ["--check"]):
        assert main(["report", "--results", str(results), "--out", str(tmp_path / "generated"), *check]) == 2
        err = capsys.readouterr().err
        assert f"kgqa: error: results file {results / 'rog' / 'quick.json'}: {says}" in err and "Traceback" not in err
    assert not (tmp_path / "generated").exists()


def test_report_reads_the_committed_results_file_unchanged(tmp_path):
    results = _committed_results(tmp_path, lambda d: None)
    assert main(["report", "--results", str(results), "--out", str(tmp_path / "generated")]) == 0
    assert "### Recipe `quick`" in (tmp_path / "generated" / "results-rog.md").read_text()


def test_report_names_the_cpus_bfloat16_instructions_where_a_results_file_records_them():
    from engine.recipes.report import _machine

    machine = {"cpu": "AMD EPYC", "cores": 2, "torch_threads": 2}
    assert _machine({"device": "cpu", "machine": {**machine, "bf16_instructions": ["amx_bf16", "avx512_bf16"]}}) == (
        "device cpu, answering in float32; 2 cores of AMD EPYC (with amx_bf16, avx512_bf16), 2 torch threads")
    for recorded in ({}, {"bf16_instructions": []}):  # files written before it was recorded, and CPUs without any
        assert _machine({"device": "cpu", "machine": {**machine, **recorded}}) == "device cpu, answering in float32; 2 cores of AMD EPYC, 2 torch threads"


def test_a_bar_is_met_below_within_its_interval_below_or_not_run():
    from engine.recipes.report import verdict

    assert verdict(0.97, {"value": 0.97, "low": 0.96, "high": 0.98}) == "met"
    assert verdict(0.976, {"value": 0.972, "low": 0.962, "high": 0.982}) == "below; the bar is inside the interval"
    assert verdict(0.90, {"value": 0.806, "low": 0.771, "high": 0.842}) == "below"
    assert verdict(0.95, None) == "not run"


def test_bars_are_checked_and_rendered_against_the_full_recipes(tmp_path):
    from engine.recipes.report import bars_page, read_bars

    bars = read_bars()
    assert {b["kind"] for b in bars} == {"paper", "target"} and all(b.get("source") for b in bars if b["kind"] == "paper")
    result = {"method": "etd", "recipe": "full", "evaluation": {"metaqa-1hop": {"scores": {"overall": {"metrics": {
        "hits1": {"value": 0.98, "low": 0.97, "high": 0.99}}}}}}}
    quick = {**result, "recipe": "quick"}
    page = bars_page([quick, result], [{"kind": "target", "method": "*", "set": "metaqa-1hop", "value": 0.976, "metric": "hits1"},
                                       {"kind": "target", "method": "ldr", "set": "metaqa-1hop", "value": 0.95, "metric": "hits1"}])
    assert "| metaqa-1hop | best method (etd) | 0.976 | Hits@1 | engine target | 0.980 [0.970, 0.990] | met |" in page
    assert "| metaqa-1hop | ldr | 0.950 | Hits@1 | engine target | – | not run |" in page
    bad = tmp_path / "bars.toml"
    bad.write_text('[[bars]]\nkind = "paper"\nmethod = "etd"\nset = "metaqa-1hop"\nvalue = 97.6\nmetric = "hits1"\nsource = "x"\n')
    with pytest.raises(InvalidInputError, match="value a share in 0..1"):
        read_bars(bad)
    bad.write_text('[[bars]]\nkind = "paper"\nmethod = "etd"\nset = "metaqa-1hop"\nvalue = 0.976\nmetric = "hits1"\n')
    with pytest.raises(InvalidInputError, match="paper \\(with a source\\)"):
        read_bars(bad)
    bad.write_text('[[bars]]\nkind = "target"\nmethod = "arg"\nset = "metaqa-1hop"\nvalue = 0.9\nmetric = "method.em"\n')
    with pytest.raises(InvalidInputError, match="needs a convention"):
        read_bars(bad)


def test_a_bar_reads_a_number_of_the_method_summary_without_an_interval():
    from engine.recipes.report import bars_page, read_bars

    assert [b["set"] for b in read_bars() if b["metric"] == "method.em"] == [
        "metaqa-1hop", "metaqa-2hop", "metaqa-3hop", "pathquestion-2h", "pathquestion-3h"]
    run = {"scores": {"overall": {"metrics": {"hits1": {"value": 0.99, "low": 0.98, "high": 1.0}}}}}
    result = {"method": "arg", "recipe": "full", "evaluation": {
        "metaqa-1hop": {**run, "method": {"em": 0.93, "parsed": 1.0}},
        "metaqa-2hop": {**run, "method": {"em": 0.85}},
        "metaqa-3hop": {**run, "method": {"parsed": 1.0}}}}
    bars = [{"kind": "target", "method": "arg", "set": s, "value": 0.9, "metric": "method.em", "convention": "form EM"}
            for s in ("metaqa-1hop", "metaqa-2hop", "metaqa-3hop")]
    page = bars_page([result], bars)
    assert "| metaqa-1hop | arg | 0.900 | form EM | engine target | 0.930 | met |" in page
    assert "| metaqa-2hop | arg | 0.900 | form EM | engine target | 0.850 | below |" in page
    assert "| metaqa-3hop | arg | 0.900 | form EM | engine target | – | not run |" in page
