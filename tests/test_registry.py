"""The method registry: every method is a spec, built from its config; every option of a config
is a flag of ``kgqa <method> run`` with the config's default; and a new method is one package
plus one registry line."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields

import pytest

from engine.cli.common import config_from_args
from engine.cli.main import build_parser, main
from engine.errors import InvalidInputError
from engine.methods import registry
from engine.methods.spec import Method, MethodSpec, Prediction, make_config, option, options


def test_one_list_of_methods_names_each_spec():
    assert registry.names() == ["rog", "ldr", "etd", "fidelis", "arg"]
    for name, spec in registry.specs().items():
        assert spec.name == name and spec.help and spec.paper
        assert registry.get(name) is spec
    with pytest.raises(InvalidInputError, match="unknown method 'rgo': use one of rog, ldr, etd, fidelis, arg"):
        registry.get("rgo")


def _other_value(o):
    """A value of the option's type that is not its default."""
    if o.choices:
        return next(c for c in o.choices if c != o.default)
    if o.kind is bool:
        return not o.default
    if o.kind is int:
        return min((o.default or 0) + 7, o.most) if o.most is not None else (o.default or 0) + 7
    if o.kind is float:
        return (o.default or 0.0) + 0.5
    return "some/value"


@pytest.mark.parametrize("name", registry.names())
def test_every_config_option_is_a_run_flag_with_the_configs_default(name):
    spec = registry.get(name)
    parser = build_parser()
    args = parser.parse_args([name, "run", "--dataset", "d"])
    assert config_from_args(spec.config, args) == spec.config()  # the command's defaults are the config's
    assert [o.name for o in options(spec.config)] == [f.name for f in fields(spec.config)]
    for o in options(spec.config):
        value = _other_value(o)
        argv = [o.flag] if o.kind is bool else [o.flag, str(value)]
        config = config_from_args(spec.config, parser.parse_args([name, "run", "--dataset", "d", *argv]))
        assert getattr(config, o.name) == value, o.flag
        if o.kind is bool:  # switched off too, as against a recipe that switches it on
            off = config_from_args(spec.config, parser.parse_args([name, "run", "--dataset", "d", "--no-" + o.flag[2:]]))
            assert getattr(off, o.name) is False, o.flag
        # the same value given as text, as a benchmark or a recipe gives it
        assert getattr(make_config(spec.config, {o.name: str(value)}), o.name) == value


def test_make_config_names_what_it_does_not_know():
    from engine.methods.rog.pipeline import RogConfig

    with pytest.raises(InvalidInputError, match=r"RogConfig has no option 'plans': use model, reasoner"):
        make_config(RogConfig, {"plans": "2"})
    with pytest.raises(InvalidInputError, match=r"option k='two': give an integer"):
        make_config(RogConfig, {"k": "two"})
    with pytest.raises(InvalidInputError, match=r"option plan_mode='wild': use one of free, vocabulary, grounded"):
        make_config(RogConfig, {"plan_mode": "wild"})
    assert make_config(RogConfig, {"path_limit": "none", "k": "2"}) == RogConfig(path_limit=None, k=2)


@pytest.mark.parametrize("name", registry.names())
def test_every_number_option_is_held_to_its_least_value_however_it_is_given(name, tmp_path, capsys):
    spec = registry.get(name)
    numbers = [o for o in options(spec.config) if o.kind in (int, float)]
    assert numbers and all(o.least is not None for o in numbers)  # a count is at least 1 unless its option says
    for o in numbers:
        below = o.least - 1 if o.kind is int else o.least - 0.5
        says = f"option {o.name} ({o.flag}) = {below!r}: use"
        with pytest.raises(InvalidInputError, match=re.escape(says)):
            spec.config(**{o.name: below})
        with pytest.raises(InvalidInputError, match=re.escape(says)):
            make_config(spec.config, {o.name: str(below)})
        assert spec.config(**{o.name: o.least if o.kind is float else int(o.least)}) is not None
        # the command refuses it before it opens a store or loads a model
        assert main([name, "run", "--dataset", "d", "--store", str(tmp_path / "none"), o.flag, str(below)]) == 2
        assert says in capsys.readouterr().err
        if o.most is not None:  # and a value past its largest, the same ways
            above = o.most + 1 if o.kind is int else o.most + 0.5
            says = f"option {o.name} ({o.flag}) = {above!r}: use"
            with pytest.raises(InvalidInputError, match=re.escape(says)):
                spec.config(**{o.name: above})
            with pytest.raises(InvalidInputError, match=re.escape(says)):
                make_config(spec.config, {o.name: str(above)})
            assert main([name, "run", "--dataset", "d", "--store", str(tmp_path / "none"), o.flag, str(above)]) == 2
            assert says in capsys.readouterr().err
    if any(o.kind is float for o in numbers):
        o = next(o for o in numbers if o.kind is float)
        with pytest.raises(InvalidInputError, match="use a number"):
            spec.config(**{o.name: float("nan")})


def test_an_integer_too_large_for_a_float_option_is_named():
    """An int past any float (10**400) fails ``math.isfinite`` with an OverflowError; it is refused
    as the option's value instead, named by its size (Python prints no int past 4,300 digits)."""
    floats = [(name, o) for name in registry.names() for o in options(registry.get(name).config) if o.kind is float]
    assert floats
    for name, o in floats:
        for value, bits in ((10**400, "1,329"), (10**5000, "16,610")):
            with pytest.raises(InvalidInputError, match=re.escape(f"option {o.name} ({o.flag}) = (an integer of {bits} bits): use a number")):
                registry.get(name).config(**{o.name: value})


def test_a_choice_option_given_a_huge_or_long_value_is_named_by_its_size_or_clipped():
    """The choices' error prints the value: an int past 4,300 digits cannot be printed, and a
    megabyte of text would make a megabyte of error."""
    for value, shown in ((10**5000, "(an integer of 16,610 bits)"), ("x" * 1_000_000, "'xxxx")):
        with pytest.raises(InvalidInputError, match=re.escape(f"option answer_mode={shown}")) as raised:
            make_config(registry.get("rog").config, {"answer_mode": value})
        assert len(str(raised.value)) < 1_000
    with pytest.raises(InvalidInputError, match=re.escape("option width='9999")) as raised:
        make_config(registry.get("fidelis").config, {"width": "9" * 1_000_000})  # as a command line gives it
    assert len(str(raised.value)) < 1_000


# ----------------------------------------------------------------------------- a new method
@dataclass(frozen=True)
class EchoConfig:
    batch_size: int = option(4, "questions answered together")


class Echo(Method):
    """Answers each question with its first topic entity's name: one names call per batch."""

    name = "echo"

    def _answer(self, questions):
        names = self.store.names([q.topic_entities[0] for q in questions])
        return [Prediction([names[q.topic_entities[0]] or ""], [q.topic_entities[0]]) for q in questions]


ECHO = MethodSpec("echo", "answers with the topic entity", EchoConfig, lambda config, store, models: Echo(store, models, config.batch_size))


@pytest.fixture
def echo_registered():
    registry.register(ECHO)
    yield ECHO
    registry.unregister("echo")


def test_a_new_method_is_one_spec_run_and_scored_like_any_other(echo_registered, tmp_path, capsys):
    kb, qa = tmp_path / "kb.txt", tmp_path / "qa_dev.txt"
    kb.write_text("Titanic|directed_by|James Cameron\nInception|directed_by|Christopher Nolan\n")
    qa.write_text("who is [James Cameron]\tJames Cameron\nwho directed [Inception]\tChristopher Nolan\n")
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\nmovie_to_director\n")
    store, out = str(tmp_path / "store"), str(tmp_path / "echo.jsonl")
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["echo", "run", "--dataset", str(qa), "--split", "all", "--store", store, "--out", out,
                 "--batch-size", "2", "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == "echo" and summary["questions"] == 2 and summary["hits1"] == 0.5
    records = [json.loads(line) for line in open(out, encoding="utf-8")]
    assert [r["prediction"] for r in records] == [["James Cameron"], ["Inception"]]
    assert [r["calls"]["store"] for r in records] == [0.5, 0.5]  # one names call for the batch of two
    assert main(["eval", out, "--json"]) == 0
    overall = json.loads(capsys.readouterr().out)["sets"]["all"]["overall"]
    assert overall["metrics"]["hits1"]["value"] == 0.5 and overall["questions"] == 2
    with pytest.raises(InvalidInputError, match="registered already"):
        registry.register(MethodSpec("echo", "another", EchoConfig, ECHO.build))
