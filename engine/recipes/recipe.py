"""Reading and checking a recipe file.

A recipe file holds one method's recipes (``[recipes.<name>]``), and may add stores of its own
(``[stores.<name>]``: ``files`` relative to the file, ``format``) beside the engine's
(:mod:`engine.recipes.stores`). A recipe:

- ``description``; ``config``: the method's options (its ``Config`` fields) for every export
  and run;
- ``[[samples]]``: training samples of a dataset's **train** split, exported through the
  method's ``training_samples``: ``dataset``, ``store``, ``sample`` (questions, default all),
  ``seed``, ``name`` (default the dataset), ``config`` (options of this export only);
- ``[[stages]]``, in order: ``kind = "lm"`` fine-tunes a causal LM (``kgqa lm train``) on a
  ``mix`` of sample sets (``{samples, tasks, questions, seed}``: the samples of at most
  ``questions`` of the set's questions, drawn with ``seed``), from ``base``; ``kind = "etd"``
  trains EtD's GNN on a dataset's train split (``kgqa etd train``);
- ``[validate]`` and ``[evaluate]``: ``config`` (options of the runs) and ``sets``
  (``{dataset, store, sample, seed, name, config}``), answered on the validation and the test
  split. Choices are made on validation results; test results are reported only;
- ``dtype``: the language models' weight precision when answering the validation and test sets
  (``kgqa <method> run --dtype``; default float32 on a CPU, bfloat16 on CUDA);
- ``extends``: another recipe of the file that this one changes. It takes that recipe's keys,
  each key it writes in place of that recipe's (``description`` it must write), except
  ``samples`` and ``stages``: each sample set or stage it writes changes the keys it writes of
  the one of that name (a sample set's name defaults to its dataset), or is added after them if
  none has that name. The recipe's hash is taken of the recipe so made, its ``description``
  aside: rewording the prose changes nothing a run does, so it leaves the results standing.

A value ``"@stage"`` (or ``"@stage/file"``) names what an earlier stage wrote. Every key is
checked: an unknown key, a missing one or a value of the wrong type is an error naming the file
and the key.
"""
from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError, clipped
from engine.identifiers import MAX_SEED
from engine.models.sft import PRECISIONS, SCHEDULES
from engine.models.transformers_lm import DTYPES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: where the engine's recipe files live: ``<method>.toml``
RECIPES_DIR = Path(__file__).resolve().parent
#: the recipe ``kgqa reproduce`` runs unless told otherwise, and the one ``--quick`` names
DEFAULT_RECIPE, QUICK_RECIPE = "full", "quick"
#: the split training samples come from, and the splits that runs answer
TRAIN_SPLIT, VALIDATE_SPLIT, TEST_SPLIT = "train", "val", "test"
STAGE_KINDS = ("lm", "etd")

# key -> its type (float accepts int); required keys
_SAMPLES_KEYS = {"dataset": str, "store": str, "sample": int, "seed": int, "name": str, "config": dict}
_SAMPLES_REQUIRED = ("dataset", "store")
_MIX_KEYS = {"samples": str, "tasks": list, "questions": int, "seed": int}
_SET_KEYS = {"dataset": str, "store": str, "sample": int, "seed": int, "name": str, "config": dict}
_RUNS_KEYS = {"config": dict, "sets": list}
#: ``kgqa lm train``'s settings (engine.models.sft.SftConfig, ``prompt_template`` its ``template``)
LM_KEYS = {
    "name": str, "kind": str, "mix": list, "base": str, "epochs": int, "lr": float, "schedule": str, "warmup": float,
    "batch_size": int, "grad_accum": int, "max_length": int, "seed": int, "val_fraction": float, "patience": int,
    "weight_decay": float, "lora": bool, "lora_r": int, "lora_alpha": int, "prompt_template": str, "precision": str,
}
LM_REQUIRED = ("name", "kind", "mix", "epochs", "lr", "batch_size", "seed")
#: ``kgqa etd train``'s settings (engine.methods.etd.config.TrainConfig)
ETD_KEYS = {
    "name": str, "kind": str, "dataset": str, "store": str, "paper_config": str, "epochs": int, "patience": int,
    "batch_size": int, "lr": float, "weight_decay": float, "dim": int, "num_layers": int, "top_k": int,
    "encoder": str, "max_train": int, "seed": int, "max_degree": int, "max_frontier": int, "time_budget": float,
    "init_from": str, "mask_topic": bool,
}
ETD_REQUIRED = ("name", "kind", "dataset", "store", "epochs", "lr", "seed")
_RECIPE_KEYS = {"description": str, "config": dict, "samples": list, "stages": list, "validate": dict, "evaluate": dict,
                "extends": str, "dtype": str}
_RECIPE_REQUIRED = ("description", "evaluate")
_STORE_KEYS = {"files": list, "format": str}
#: keys whose whole numbers count questions: a set of none would fail only once its step starts
_COUNTS = ("sample", "questions")
#: the longest name of a recipe, sample set, stage or set (each names a file or folder of a run)
MAX_NAME = 100


@dataclass(frozen=True)
class StoreSource:
    """What a store holds: ``files`` loaded in ``format``; or, for ``kind="webqsp-slice"``, the
    FB15k-237 directory ``kb`` with the WebQSP file whose slice the load builds (``builds``)."""

    name: str
    files: tuple[Path, ...] = ()
    format: str | None = None
    kind: str = "files"
    kb: Path | None = None
    webqsp: Path | None = None
    ontology: Path | None = None
    builds: str | None = None

    def describe(self) -> dict[str, Any]:
        """The definition, for hashes: file names, not where the data directory is."""
        names = [p.name for p in (*self.files, *(p for p in (self.kb, self.webqsp, self.ontology) if p))]
        return {"name": self.name, "kind": self.kind, "format": self.format, "files": names, "builds": self.builds}


#: the engine's stores: files under the datasets directory (``loaders.datasets.data_dir``)
BUILT_IN: dict[str, StoreSource] = {
    "metaqa": StoreSource("metaqa", (Path("metaqa/kb.txt.gz"),), "metaqa"),
    "pathquestion-2h": StoreSource("pathquestion-2h", (Path("pathquestion/2H-kb.txt"),), "tsv"),
    "pathquestion-3h": StoreSource("pathquestion-3h", (Path("pathquestion/3H-kb.txt"),), "tsv"),
    # FB15k-237 with the WebQSP slice over it (``kgqa webqsp build``): the slice is built as the KB loads
    "fb15k237": StoreSource("fb15k237", kind="webqsp-slice", kb=Path("fb15k237"), webqsp=Path("webqsp/WebQSP.train.json.gz"),
                            ontology=Path("freebase-ontology"), builds="webqsp-fb15k237"),
}


@dataclass(frozen=True)
class QuestionSelection:
    """Questions of a dataset on a store (a ``sample`` of them drawn with ``seed``, or all) with
    the method's options for them: a set of training samples, or a set answered in
    validation or test."""

    name: str
    dataset: str
    store: str
    sample: int | None
    seed: int
    config: dict[str, Any]


@dataclass(frozen=True)
class MixPart:
    samples: str
    tasks: tuple[str, ...] | None
    questions: int | None
    seed: int


@dataclass(frozen=True)
class Stage:
    """A training stage: its ``kind``, its ``settings`` (the kind's keys less name, kind, mix,
    dataset, store) and, for ``lm``, its ``mix``; for ``etd``, its dataset and store."""

    name: str
    kind: str
    settings: dict[str, Any]
    mix: tuple[MixPart, ...] = ()
    dataset: str | None = None
    store: str | None = None

    def lm_settings(self) -> tuple[str | None, str | None, dict[str, Any]]:
        """An ``lm`` stage's base model, prompt template and the rest of its settings, which are
        :class:`engine.models.sft.SftConfig` fields."""
        settings = dict(self.settings)
        return settings.pop("base", None), settings.pop("prompt_template", None), settings


@dataclass(frozen=True)
class Recipe:
    method: str
    name: str
    file: Path
    description: str
    config: dict[str, Any]
    samples: tuple[QuestionSelection, ...]
    stages: tuple[Stage, ...]
    validate: tuple[QuestionSelection, ...]
    evaluate: tuple[QuestionSelection, ...]
    stores: dict[str, StoreSource] = field(default_factory=dict)
    #: sha256 of the recipe as written, its description aside, and of the stores it names
    hash: str = ""
    #: the language models' weight precision when answering (None: the device's default)
    dtype: str | None = None


class _Where:
    """Where in a recipe file a value sits, for error messages."""

    def __init__(self, file: Path, path: str = "") -> None:
        self.file, self.path = file, path

    def __truediv__(self, key: str | int) -> _Where:
        if isinstance(key, int):
            return _Where(self.file, f"{self.path}[{key}]")
        return _Where(self.file, f"{self.path}.{key}" if self.path else key)

    def error(self, message: str) -> InvalidInputError:
        return InvalidInputError(f"recipe file {self.file}: {self.path or 'top level'}: {message}")


def _check_table(table: Any, keys: Mapping[str, type], required: tuple[str, ...], where: _Where) -> dict[str, Any]:
    """``table`` as a dict whose keys are all known, with every required key, each value of its type."""
    if not isinstance(table, dict):
        raise where.error(f"expected a table, not {type(table).__name__}")
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise where.error(f"unknown key {', '.join(map(repr, unknown))}: use {', '.join(keys)}")
    for key in required:
        if key not in table:
            raise where.error(f"missing key {key!r} (required: {', '.join(required)})")
    for key, value in table.items():
        kind = keys[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float else (
            isinstance(value, kind) and not (kind is int and isinstance(value, bool)))
        if not ok:
            raise (where / key).error(f"expected {kind.__name__}, not {type(value).__name__} ({value!r})")
        if key == "seed" and not 0 <= value <= MAX_SEED:  # torch and numpy refuse others once training starts
            raise (where / key).error(f"{value}: give a whole number from 0 to {MAX_SEED}")
        if key in _COUNTS and value < 1:
            raise (where / key).error(f"{value}: give a whole number of at least 1")
    return dict(table)


def _check_name(name: str, what: str, where: _Where, fix: str = "") -> str:
    """``name`` as it names one file or folder of a run's directory: a stage's folder is removed
    and made anew, so a name that reached outside the run could delete what is there."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or len(name) > MAX_NAME:
        raise where.error(f"{clipped(repr(name), 60)} cannot name a {what}: {fix or 'give'} a name of 1 to {MAX_NAME} "
                          "characters without '/', '\\' or NUL, not '.' or '..'")
    return name


def _tables(items: Any, where: _Where) -> list[Any]:
    if not isinstance(items, list):
        raise where.error("expected a list of tables")
    return items


def recipe_file(method: str, directory: Path | None = None) -> Path:
    """The recipe file of ``method`` (``<directory or the engine's>/<method>.toml``)."""
    path = (directory or RECIPES_DIR) / f"{method}.toml"
    if not path.is_file():
        raise InvalidInputError(f"no recipe file for method {method!r} ({path} does not exist)")
    return path


def read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise InvalidInputError(f"recipe file {path}: not valid TOML: {e}") from e
    except RecursionError:  # tomllib reads nested arrays and tables by recursion
        raise InvalidInputError(f"recipe file {path}: not valid TOML: arrays or tables nested too deep to read") from None
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"recipe file {path}: not UTF-8 text ({e.reason} at byte {e.start}): give a TOML file") from e
    except OSError as e:
        raise InvalidInputError(f"cannot read recipe file {path}: {e.strerror}") from e


def _read_recipes(method: str, path: Path) -> tuple[dict[str, Any], _Where]:
    """``method``'s recipe file read, its top-level keys checked, and where its keys are named."""
    raw = read_file(path)
    top = _Where(path)
    _check_table(raw, {"method": str, "stores": dict, "recipes": dict}, ("method", "recipes"), top)
    if raw["method"] != method:
        raise (top / "method").error(f"the file is {raw['method']!r}'s, not {method!r}'s")
    if not raw["recipes"]:
        raise (top / "recipes").error("no recipes: write at least one [recipes.NAME] table")
    return raw, top


def recipe_names(method: str, path: Path | None = None) -> list[str]:
    """The names of the recipes in ``method``'s recipe file (``path``, default the engine's)."""
    return list(_read_recipes(method, path or recipe_file(method))[0]["recipes"])


def load_recipe(method: str, name: str, path: Path | None = None) -> Recipe:
    """Recipe ``name`` of ``method``'s recipe file (``path``, default the engine's), checked."""
    from engine.methods.registry import get

    spec = get(method)
    path = path or recipe_file(method)
    raw, top = _read_recipes(method, path)
    recipes = raw["recipes"]
    if name not in recipes:
        raise (top / "recipes").error(f"no recipe {clipped(repr(name), 60)}: use one of {', '.join(recipes)}")
    _check_name(name, "recipe", top / "recipes" / name, "rename it:")
    stores = dict(BUILT_IN)
    for store_name, table in raw.get("stores", {}).items():
        where = top / "stores" / store_name
        t = _check_table(table, _STORE_KEYS, ("files",), where)
        files = tuple((path.parent / str(f)).resolve() for f in t["files"])
        for f in files:
            if not f.is_file():
                raise (where / "files").error(f"{f} is not a file")
        stores[store_name] = StoreSource(store_name, files, t.get("format"))

    where = top / "recipes" / name
    resolved = _resolve(recipes, name, top)
    table = _check_table(resolved, _RECIPE_KEYS, _RECIPE_REQUIRED, where)
    config = table.get("config", {})
    _check_config(spec.config, config, where / "config", set())
    if table.get("dtype") not in (None, *DTYPES):
        raise (where / "dtype").error(f"unknown dtype {table['dtype']!r}: use one of {', '.join(DTYPES)}")

    def dataset_of(value: str, store: str, w: _Where) -> str:
        from loaders.datasets import BUILT_DATASETS, DATASETS, built_together

        if store not in stores:
            raise (w / "store").error(f"unknown store {store!r}: use one of {', '.join(stores)}")
        if value in BUILT_DATASETS:
            def writes(source: StoreSource) -> bool:  # the store's load builds the dataset
                return source.builds is not None and value in built_together(source.builds)

            if not writes(stores[store]):
                builders = [s.name for s in stores.values() if writes(s)]
                raise (w / "store").error(f"dataset {value!r} is built with the store {', '.join(builders)}, not {store!r}")
            return value
        if value in DATASETS:
            return value
        file = (path.parent / value).resolve()
        if not file.is_file():
            raise (w / "dataset").error(f"unknown dataset {value!r}: use one of {', '.join([*DATASETS, *BUILT_DATASETS])} "
                                        "or a question file relative to the recipe file")
        return str(file)

    def selection(t: dict[str, Any], w: _Where, shared: dict[str, Any], what: str) -> QuestionSelection:
        named = "name" in t
        name = _check_name(t["name"] if named else t["dataset"], what, w / ("name" if named else "dataset"),
                           "give" if named else f"its name defaults to its dataset: give it `name =`,")
        return QuestionSelection(name, dataset_of(t["dataset"], t["store"], w), t["store"],
                                 t.get("sample"), t.get("seed", 0), {**shared, **t.get("config", {})})

    samples: list[QuestionSelection] = []
    for i, item in enumerate(_tables(table.get("samples", []), where / "samples")):
        w = where / "samples" / i
        t = _check_table(item, _SAMPLES_KEYS, _SAMPLES_REQUIRED, w)
        if spec.training_samples is None:
            raise w.error(f"the method {method!r} exports no training samples")
        s = selection(t, w, {}, "sample set")
        _check_config(spec.config, {**config, **s.config}, w / "config", set())
        if s.name in {x.name for x in samples}:
            raise (w / "name").error(f"two sample sets are named {s.name!r}: give one a name")
        samples.append(s)
    sample_names = {s.name for s in samples}

    stages: list[Stage] = []
    for i, item in enumerate(_tables(table.get("stages", []), where / "stages")):
        w = where / "stages" / i
        if not isinstance(item, dict) or item.get("kind") not in STAGE_KINDS:
            kind = item.get("kind") if isinstance(item, dict) else None
            raise (w / "kind").error(f"{'missing key' if kind is None else f'unknown kind {kind!r}'}: use one of {', '.join(STAGE_KINDS)}")
        earlier = {s.name for s in stages}
        if item["kind"] == "lm":
            t = _check_table(item, LM_KEYS, LM_REQUIRED, w)
            _check_name(t["name"], "stage", w / "name")
            if t.get("precision", "auto") not in PRECISIONS:
                raise (w / "precision").error(f"unknown precision {t['precision']!r}: use one of {', '.join(PRECISIONS)}")
            if t.get("schedule", "linear") not in SCHEDULES:
                raise (w / "schedule").error(f"unknown schedule {t['schedule']!r}: use one of {', '.join(SCHEDULES)}")
            mix = []
            for j, part in enumerate(_tables(t["mix"], w / "mix")):
                p = _check_table(part, _MIX_KEYS, ("samples",), w / "mix" / j)
                if p["samples"] not in sample_names:
                    raise (w / "mix" / j / "samples").error(f"no sample set {p['samples']!r}: use one of {', '.join(sorted(sample_names)) or '(none)'}")
                mix.append(MixPart(p["samples"], tuple(p["tasks"]) if "tasks" in p else None, p.get("questions"), p.get("seed", 0)))
            if not mix:
                raise (w / "mix").error("an lm stage trains on at least one sample set")
            _check_ref(t.get("base"), earlier, w / "base")
            settings = {k: v for k, v in t.items() if k not in ("name", "kind", "mix", "base", "prompt_template")}
            _check_lm_settings({**settings, "template": t.get("prompt_template")}, w)
            stage = Stage(t["name"], "lm", {k: v for k, v in t.items() if k not in ("name", "kind", "mix")}, tuple(mix))
        else:
            t = _check_table(item, ETD_KEYS, ETD_REQUIRED, w)
            _check_name(t["name"], "stage", w / "name")
            _check_ref(t.get("init_from"), earlier, w / "init_from")
            settings = {k: v for k, v in t.items() if k not in ("name", "kind", "dataset", "store")}
            dataset = dataset_of(t["dataset"], t["store"], w)
            _check_etd_settings(settings, dataset, w)
            stage = Stage(t["name"], "etd", settings, dataset=dataset, store=t["store"])
        if stage.name in earlier:
            raise (w / "name").error(f"two stages are named {stage.name!r}")
        stages.append(stage)
    stage_names = {s.name for s in stages}

    def runs(key: str, required: bool) -> tuple[QuestionSelection, ...]:
        if key not in table:
            return ()
        w = where / key
        t = _check_table(table[key], _RUNS_KEYS, ("sets",) if required else (), w)
        shared = {**config, **t.get("config", {})}
        _check_config(spec.config, shared, w / "config", stage_names)
        found: list[QuestionSelection] = []
        for i, item in enumerate(_tables(t.get("sets", []), w / "sets")):
            ws = w / "sets" / i
            s = _check_table(item, _SET_KEYS, ("dataset", "store"), ws)
            e = selection(s, ws, shared, "set")
            _check_config(spec.config, e.config, ws / "config", stage_names)
            if e.name in {x.name for x in found}:
                raise (ws / "name").error(f"two sets are named {e.name!r}: give one a name")
            found.append(e)
        if required and not found:
            raise (w / "sets").error("name at least one set")
        return tuple(found)

    validate, evaluate = runs("validate", False), runs("evaluate", True)
    used = {s.store for s in (*samples, *validate, *evaluate)} | {s.store for s in stages if s.store}
    digest = hashlib.sha256(json.dumps(
        {"method": method, "recipe": {k: v for k, v in resolved.items() if k != "description"},
         "stores": [stores[s].describe() for s in sorted(used)]},
        sort_keys=True, ensure_ascii=False,
    ).encode()).hexdigest()
    return Recipe(method, name, path, table["description"], config, tuple(samples), tuple(stages), validate, evaluate,
                  {s: stores[s] for s in sorted(used)}, digest, table.get("dtype"))


#: the lists of named tables a recipe that extends another changes by name: key -> (what a table is, its name)
_MERGED_BY_NAME = {
    "samples": ("sample set", lambda t: t.get("name", t.get("dataset"))),
    "stages": ("stage", lambda t: t.get("name")),
}


def _resolve(recipes: dict[str, Any], name: str, top: _Where, seen: tuple[str, ...] = ()) -> Any:
    """Recipe ``name`` as written or, when it ``extends`` another, as that one changed by it."""
    table = recipes[name]
    if not isinstance(table, dict) or "extends" not in table:
        return table
    where = top / "recipes" / name
    base_name = table["extends"]
    if not isinstance(base_name, str) or base_name not in recipes or base_name == name:
        others = [r for r in recipes if r != name]
        raise (where / "extends").error(f"no other recipe {base_name!r} to extend: use one of {', '.join(others) or '(none)'}")
    if base_name in seen:
        raise (where / "extends").error(f"recipes extend each other in a circle: {' → '.join((*seen, name, base_name))}")
    if "description" not in table:
        raise where.error(f"missing key 'description': say how this recipe differs from {base_name!r}")
    base = _resolve(recipes, base_name, top, (*seen, name))
    if not isinstance(base, dict):
        raise (top / "recipes" / base_name).error(f"expected a table, not {type(base).__name__}")
    merged = {**base, **{k: v for k, v in table.items() if k not in ("extends", *_MERGED_BY_NAME)}}
    for key, (what, name_of) in _MERGED_BY_NAME.items():
        if key not in table:
            continue
        items = [dict(t) if isinstance(t, dict) else t for t in _tables(base.get(key, []), top / "recipes" / base_name / key)]
        for i, change in enumerate(_tables(table[key], where / key)):
            if not isinstance(change, dict) or not isinstance(name_of(change), str):
                raise (where / key / i).error(f"a {what} of a recipe that extends another names the {what} it changes or adds")
            same = [t for t in items if isinstance(t, dict) and name_of(t) == name_of(change)]
            if same:
                same[0].update(change)
            else:
                items.append(dict(change))
        merged[key] = items
    return merged


def _check_ref(value: Any, stages: set[str], where: _Where) -> None:
    """A ``"@stage[/file]"`` value must name a stage that runs before it."""
    if isinstance(value, str) and value.startswith("@"):
        stage = value[1:].split("/", 1)[0]
        if stage not in stages:
            raise where.error(f"{value!r} names no earlier stage: use one of {', '.join('@' + s for s in sorted(stages)) or '(none)'}")


def _check_lm_settings(settings: dict[str, Any], where: _Where) -> None:
    """A training stage's settings as ``kgqa lm train`` holds them (epochs at least 1, a finite
    learning rate …), checked when the recipe is read rather than when the stage starts."""
    from engine.models.sft import SftConfig

    try:
        SftConfig(**settings)
    except InvalidInputError as e:
        raise where.error(str(e)) from None


def _check_etd_settings(settings: dict[str, Any], dataset: str, where: _Where) -> None:
    """An EtD stage's settings as ``kgqa etd train`` holds them, checked when the recipe is read
    rather than when the stage starts: the paper's settings it starts from (``paper_config``, else
    its dataset's) must exist, and every number must be one training takes."""
    from engine.methods.etd.config import TrainConfig, paper_layers_top_k

    paper = settings.get("paper_config", dataset)
    try:
        paper_layers_top_k(paper, "name them with paper_config, one of")
    except InvalidInputError as e:
        raise (where / ("paper_config" if "paper_config" in settings else "dataset")).error(str(e)) from None
    try:
        TrainConfig.for_dataset(paper, **{k: v for k, v in settings.items() if k != "paper_config"})
    except InvalidInputError as e:
        raise where.error(str(e)) from None


def _check_config(config_type: type, values: dict[str, Any], where: _Where, stages: set[str]) -> None:
    """``values`` must be options of the method's config, with ``@stage`` references to ``stages`` only."""
    from engine.methods.spec import make_config

    for key, value in values.items():
        _check_ref(value, stages, where / key)
    try:
        make_config(config_type, values)
    except InvalidInputError as e:
        raise where.error(str(e)) from None
