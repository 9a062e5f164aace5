"""A method as one spec: its options, how it is built and what its language model trains on.

Every method package exports ``SPEC``, a :class:`MethodSpec`; :mod:`engine.methods.registry`
names them all, and the command line, the benchmarks and the tests build methods only through
it:

- ``config`` is a frozen dataclass holding every option with its default (the setting the
  method's docs report) and its help (:func:`option`); ``kgqa <method> run`` takes one flag per
  field (:func:`options`), and :func:`make_config` builds one from plain values (a benchmark's or
  a recipe's ``key = value`` pairs);
- ``build(config, store, models)`` loads what the config names and returns a :class:`Method`.
  ``store`` is the plain store, for setup work that must not be metered (an index build, the
  demonstrations' gold forms); the method meters its own calls (:class:`Method`);
- ``training_samples(store, questions, config)``, for a method whose paper fine-tunes its
  language model, yields :class:`engine.models.sft.Sample` objects exactly as the model sees them
  at inference (``kgqa <method> export-training``, then ``kgqa lm train``);
- a method's other commands (an index build, a ranker's trainer) live in ``engine.cli.<method>``.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from engine.errors import InvalidInputError, KGQAError, clipped
from engine.identifiers import check_list, positive_int, shown_value
from engine.methods.meter import Meter
from loaders.questions import Question

if TYPE_CHECKING:
    from engine.models.sft import Sample
    from engine.store import Store
    from loaders.datasets import QuestionSet


@dataclass
class Prediction:
    """One question's answer: names (or literal values) best first, their ids where the
    method knows them, the method's trace of how it got there: a dataclass of the method's
    own, which the record holds under the method's name (:func:`engine.results.to_json`), and
    where the answer is empty, the ``warning`` that says why (the record's ``warning``)."""

    answers: list[str]
    answer_ids: list[str] | None = None
    trace: Any = None
    warning: str | None = None


def empty_reply(model: str, reply: str | None, gives: str) -> str:
    """A :attr:`Prediction.warning` for an answer left empty by ``model``'s ``reply``: that it is
    empty, or the reply (clipped) and what it ``gives``."""
    if reply is None or not reply.strip():
        return f"{model}'s reply is empty"
    return f"{model}'s reply {clipped(repr(reply), 200)} {gives}"


def option(default: Any, help: str, *, flag: str | None = None, short: str | None = None,
           choices: Sequence[str] | None = None, least: float | None = None, most: float | None = None) -> Any:
    """A config field that is an option: its default, its help, and where the command line's
    flag differs from the field's name, the flag (``--plans`` for ``k``). ``least`` is the
    smallest value a number may take (default 1 for an int: a count; none for a float), ``most``
    the largest (default none); :func:`check_options` holds a config to them."""
    return field(default=default, metadata={"help": help, "flag": flag, "short": short,
                                            "choices": tuple(choices) if choices else None, "least": least, "most": most})


@dataclass(frozen=True)
class Option:
    """One option of a config, as the command line and :func:`make_config` read it."""

    name: str
    kind: type  # int, float, str or bool
    optional: bool  # None is a value
    default: Any
    help: str
    flag: str
    short: str | None
    choices: tuple[str, ...] | None
    least: float | None  # the smallest value a number may take
    most: float | None = None  # the largest

    def kind_words(self) -> str:
        """The option's kind in words ("an integer")."""
        return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[self.kind]

    def wanted(self) -> str:
        """What a value of this option is, in words ("an integer", "a number or null")."""
        return self.kind_words() + (" or null" if self.optional else "")


def options(config_type: type) -> list[Option]:
    """The options of a config dataclass, in field order."""
    hints = typing.get_type_hints(config_type)
    found = []
    for f in dataclasses.fields(config_type):
        kind, optional = _scalar(hints[f.name], config_type, f.name)
        meta = f.metadata
        if "help" not in meta:
            raise TypeError(f"{config_type.__name__}.{f.name} has no help: declare it with engine.methods.spec.option")
        least = meta.get("least")
        found.append(Option(
            f.name, kind, optional, f.default, meta["help"], meta.get("flag") or "--" + f.name.replace("_", "-"),
            meta.get("short"), meta.get("choices"), 1 if least is None and kind is int else least, meta.get("most"),
        ))
    return found


def check_options(config: Any) -> None:
    """Every number option of ``config`` a number from its smallest value to its largest
    (:func:`option`'s ``least`` and ``most``): an error naming the option and its flag. Each
    config's ``__post_init__`` calls it, so a command line, a recipe, an HTTP request and Python
    code are held to the same bounds."""
    for o in options(type(config)):
        value = getattr(config, o.name)
        if o.kind not in (int, float) or value is None or (o.least is None and o.most is None):
            continue
        number = isinstance(value, int) if o.kind is int else isinstance(value, (int, float)) and _finite(value)
        if isinstance(value, bool) or not number or (o.least is not None and value < o.least) or (
                o.most is not None and value > o.most):
            least, most = _shown(o.least), _shown(o.most)
            bounds = f"from {least} to {most}" if least is not None and most is not None else (
                f"of at least {least}" if most is None else f"of at most {most}")
            raise InvalidInputError(f"option {o.name} ({o.flag}) = {shown_value(value)}: use {o.kind_words()} {bounds}"
                                    + (" (or none)" if o.optional else ""))


def _finite(number: float) -> bool:
    """Whether ``number`` is finite as a float: an int too large for one is not."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _shown(bound: float | None) -> float | int | None:
    """A bound as an error message writes it: 1, not 1.0."""
    return int(bound) if bound is not None and float(bound).is_integer() else bound


def _scalar(hint: Any, owner: type, name: str) -> tuple[type, bool]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and rest[0] in (int, float, str, bool):
            return rest[0], True
    elif hint in (int, float, str, bool):
        return hint, False
    raise TypeError(f"{owner.__name__}.{name}: an option is an int, float, str or bool (or one of them or None), not {hint}")


def make_config(config_type: type, values: Mapping[str, Any]) -> Any:
    """A config from ``values`` (field names; strings are read as the field's type, as a
    command line or a ``key=value`` option gives them); unknown names are refused, naming the
    known ones."""
    known = {o.name: o for o in options(config_type)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise InvalidInputError(
            f"{config_type.__name__} has no option {', '.join(map(repr, unknown))}: use {', '.join(known)}"
        )
    return config_type(**{k: _read(known[k], v) for k, v in values.items()})


def _read(o: Option, value: Any) -> Any:
    if value is None or not isinstance(value, str) or o.kind is str:
        if o.choices and value is not None and value not in o.choices:
            raise InvalidInputError(f"option {o.name}={shown_value(value)}: use one of {', '.join(o.choices)}")
        return value
    if o.optional and value.lower() in ("none", "null", ""):
        return None
    try:
        if o.kind is bool:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        return o.kind(value)
    except ValueError:
        raise InvalidInputError(f"option {o.name}={shown_value(value)}: give {o.wanted()}") from None


@dataclass
class Models:
    """What a method's ``build`` needs besides its config and the store: where models run, the
    meter that times them, and the questions the run answers (ARG draws its demonstrations
    from the rest of their dataset; EtD checks its checkpoint was trained on another part)."""

    device: str | None = None
    dtype: str | None = None
    meter: Meter = field(default_factory=Meter)
    questions: QuestionSet | None = None
    progress: bool = True  # show progress of long setup work (an index build)
    #: whether building a method may build (and write) an index it needs: a server's may not, its operator builds them
    build_indexes: bool = True

    def lm(self, source: str | None, template: str | None = None) -> Any:
        """The language model ``source`` names (:func:`engine.models.lm.load_lm`), its calls
        timed as model time."""
        from engine.models.loading import load_lm

        return self.meter.lm(load_lm(source, self.device, template, self.dtype))


class Method(ABC):
    """A method answering batches of questions on the run protocol (:mod:`engine.methods.run`).

    The base keeps the store behind the meter, so every store call the method makes counts as
    store time (its language models come metered from :meth:`Models.lm`). :meth:`answer` is a
    template method: it checks the batch and the answers, :meth:`_answer` is the method's own."""

    name: ClassVar[str]

    def __init__(self, store: Store, models: Models, batch_size: int) -> None:
        self.meter = models.meter
        self.store = self.meter.store(store)
        #: the same store, not metered: for work that is not answering (scoring against the gold)
        self.unmetered_store = store
        self.batch_size = positive_int(batch_size, "batch size")

    def answer(self, questions: Sequence[Question]) -> list[Prediction]:
        """One :class:`Prediction` per question, in order."""
        batch = questions_list(questions)
        for q in batch:
            if not isinstance(q, Question):
                raise InvalidInputError(f"{self.name} answers Question objects (loaders.questions.Question, as load_dataset "
                                        f"gives them), got {clipped(repr(q), 200)}")
        predictions = self._answer(batch) if batch else []
        if len(predictions) != len(batch):
            raise KGQAError(f"{self.name} answered {len(predictions)} of {len(batch)} questions")
        return predictions

    @abstractmethod
    def _answer(self, questions: list[Question]) -> list[Prediction]: ...

    def summary(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Figures of the method's own that the run's summary adds (none by default)."""
        return {}


def questions_list(questions: Iterable[Question]) -> list[Question]:
    """``questions`` as a list, refusing a lone Question, None or another non-collection."""
    if isinstance(questions, Question):
        raise InvalidInputError(f"expected a list of Questions, got one Question: wrap it, [{clipped(repr(questions), 150)}]")
    check_list(questions, "questions", "Questions (loaders.questions.Question)")
    return list(questions)


@dataclass(frozen=True)
class MethodSpec:
    """Everything the engine knows of one method (the module doc)."""

    name: str
    help: str
    config: type
    build: Callable[[Any, Store, Models], Method]
    training_samples: Callable[[Store, Sequence[Question], Any], Iterable[Sample]] | None = None
    paper: str = ""
