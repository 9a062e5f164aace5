"""Questions answered by a registered method (:mod:`engine.methods.registry`), as ``/v1/answer``
serves them; no web framework here.

A method is built once per (method, config) and kept (the least recently used dropped past
``--method-cache``); its models load with it. A request's ``config`` may set the options whose
values are flags or one of their choices, and lower (never raise) those that are numbers; the
options that name models, files or templates are the operator's (``kgqa serve --method-option
rog.model=…``), so that no request makes the server load a file or call a model server it was
not started with. A built method
answers one request at a time (its meter times one batch); the answer is the run protocol's
record per question (:mod:`engine.methods.run`) with the method's trace under ``trace``.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.errors import DeadlineExceededError, InvalidInputError
from engine.identifiers import validate_text
from engine.methods import registry
from engine.methods.run import run_method
from engine.methods.spec import Method, Models, Option, make_config, options
from engine.serve.errors import RequestBodyError
from engine.serve.ops import MAX_ITEMS, check_texts, describe
from engine.serve.settings import ServeSettings
from engine.store import Store
from loaders.questions import Question


#: the longest question a request may ask, in characters: far beyond a real question, and refused
#: before a tokenizer reads it
MAX_QUESTION_LENGTH = 10_000


class QuestionIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    question: str = Field(description=f"the question's text (at most {MAX_QUESTION_LENGTH:,} characters)")
    topics: list[str] = Field(default_factory=list, max_length=MAX_ITEMS, description="its topic entities (node ids)")
    answers: list[str] = Field(default_factory=list, max_length=MAX_ITEMS, description="gold answers, where known (for the summary's scores)")
    answer_ids: list[str] = Field(default_factory=list, max_length=MAX_ITEMS, description="gold answer ids, where known")
    id: str | None = Field(None, description="the question's id (default: its position)")


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    method: str = Field(description="a registered method: rog, ldr, etd, fidelis, arg")
    question: str | None = Field(
        None, description=f"one question, at most {MAX_QUESTION_LENGTH:,} characters (or give questions)"
    )
    topics: list[str] = Field(default_factory=list, max_length=MAX_ITEMS, description="the topic entities of question")
    questions: list[QuestionIn] | None = Field(None, max_length=MAX_ITEMS, description="a batch of questions (or give question)")
    config: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, description="options of the method's config that a request may set (GET /v1/methods lists them)"
    )
    timeout: float | None = Field(None, gt=0, description="seconds the request may take (default and most: the server's)")

    @model_validator(mode="after")
    def _one_form(self) -> AnswerRequest:
        if (self.question is None) == (self.questions is None):
            raise ValueError("give either question (with topics) or questions, not both or neither")
        if self.questions is not None and self.topics:
            raise ValueError("topics go with question; each of questions has its own")
        return self

    def check(self) -> None:
        """Refuse, before any work, text that is not valid Unicode anywhere in the request (a
        tokenizer fails on a lone surrogate, and so does writing the answer) and a question past
        :data:`MAX_QUESTION_LENGTH` characters."""
        check_texts(self.model_dump(exclude={"timeout"}))
        asked = [("question", self.question)] if self.question is not None else [
            (f"questions[{i}].question", q.question) for i, q in enumerate(self.questions or [])]
        for where, text in asked:
            validate_text(text, where, max_length=MAX_QUESTION_LENGTH)

    def batch(self) -> list[Question]:
        if self.question is not None:
            return [Question("q0", self.question, [], list(self.topics), [])]
        return [
            Question(q.id if q.id is not None else f"q{i}", q.question, list(q.answers), list(q.topics), list(q.answer_ids))
            for i, q in enumerate(self.questions or [])
        ]


def settable(o: Option) -> bool:
    """Whether a request may set the option: a number, a flag or one of its choices (an option
    that names a model, a file or a template is the operator's)."""
    return o.kind is not str or o.choices is not None


def describe_methods() -> list[dict[str, Any]]:
    """Every registered method with its options, and which of them a request may set."""
    return [
        {
            "name": spec.name,
            "help": spec.help,
            "paper": spec.paper,
            "options": [
                {"name": o.name, "type": o.kind.__name__, "optional": o.optional, "default": o.default, "help": o.help,
                 "choices": list(o.choices) if o.choices else None, "settable": settable(o)}
                for o in options(spec.config)
            ],
        }
        for spec in registry.specs().values()
    ]


def _checked(o: Option, value: Any) -> Any:
    """A request's value for option ``o``, if its JSON type is the option's."""
    if value is None:
        if o.optional:
            return value
    elif o.kind is bool and isinstance(value, bool):
        return value
    elif o.kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif o.kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif o.kind is str and isinstance(value, str):
        return value  # one of its choices: make_config checks
    raise InvalidInputError(f"option {o.name}={value!r}: give {o.wanted()}")


@dataclass
class _Built:
    method: Method
    config: Any
    lock: threading.Lock


class _Building:
    """A build of one method and config under way. The requests that ask for the same meanwhile
    wait for it and get what it ended with: the method, or the error it failed with (as
    ``concurrent.futures.Future.result`` raises one error to every caller), never a build of
    their own. A request that comes after it has ended builds anew."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.built: _Built | None = None
        self.error: BaseException | None = None
        self.waiting = 0  # requests waiting for it, besides the one that builds


class Answerer:
    """Builds methods on one store, keeps them, and answers with them."""

    def __init__(self, store: Store, settings: ServeSettings) -> None:
        self.store = store
        self.settings = settings
        self._built: OrderedDict[tuple[str, str], _Built] = OrderedDict()
        self._lock = threading.Lock()  # guards the dicts only: never held while a method builds
        self._building: dict[tuple[str, str], _Building] = {}  # per method and config, while it builds
        self._served: dict[str, Any] = {}  # per method, the operator's config: the bounds of a request's numbers

    @staticmethod
    def parse(body: Any) -> AnswerRequest:
        if isinstance(body, AnswerRequest):
            return body
        try:
            return AnswerRequest.model_validate(body)
        except ValidationError as e:
            raise RequestBodyError(f"answer: {describe(e.errors())}") from None

    def config(self, name: str, values: dict[str, Any]) -> Any:
        """The config of method ``name``: the operator's options, then the request's ``values``."""
        spec = registry.get(name)
        known = {o.name: o for o in options(spec.config)}
        asked: dict[str, Any] = {}
        for key, value in values.items():
            o = known.get(key)
            if o is None:
                raise InvalidInputError(f"{name} has no option {key!r}: use {', '.join(k for k, o in known.items() if settable(o))}")
            if not settable(o):
                raise InvalidInputError(
                    f"option {key} of {name} names a model, a file or a template, which only the server's operator sets: "
                    f"start kgqa serve with --method-option {name}.{key}=VALUE"
                )
            asked[key] = _checked(o, value)
        served = self._served.get(name)
        if served is None:
            served = self._served[name] = make_config(spec.config, self.settings.method_options.get(name, {}))
        most_rows = self.settings.max_rows
        for key, value in asked.items():
            if known[key].kind not in (int, float):
                continue
            limit = getattr(served, key)
            # a number sizes the work (beams, paths, batch): a request may lower it, never raise it,
            # as it may lower the deadline and the row bound
            raise_with = f"(the operator raises it with --method-option {name}.{key}=VALUE)"
            if limit is None and value is not None and value > most_rows:
                # the server leaves it to the method: no answer holds more than --max-rows rows
                raise InvalidInputError(
                    f"option {key}={value!r} of {name} is above this server's bound of {most_rows:,} for an option it "
                    f"leaves unset (--max-rows): give at most {most_rows:,} {raise_with}"
                )
            if limit is not None and value is None:
                raise InvalidInputError(
                    f"option {key}=null of {name} would lift this server's {limit!r}: a request may only lower it "
                    f"{raise_with}"
                )
            if limit is not None and value > limit:
                raise InvalidInputError(
                    f"option {key}={value!r} of {name} is above this server's {limit!r}: a request may only lower it "
                    f"{raise_with}"
                )
        return make_config(spec.config, {**self.settings.method_options.get(name, {}), **asked})

    def method(self, name: str, config: Any, expires: float | None = None) -> _Built:
        """The method ``name`` built with ``config``, built now if it is not kept. Each method
        and config builds on its own, so a long build holds up only requests for the same one,
        and those wait for it until ``expires`` (a :func:`time.monotonic` instant), then 504; where
        it fails, they fail with its error (:class:`_Building`). A build itself runs to its end
        (loading models cannot stop midway); it never builds an index the method needs
        (:attr:`Models.build_indexes`): the operator builds those."""
        key = (name, repr(config))
        with self._lock:
            built = self._built.get(key)
            if built is not None:
                self._built.move_to_end(key)
                return built
            building = self._building.get(key)
            builds = building is None
            if building is None:
                building = self._building[key] = _Building()
            else:
                building.waiting += 1
        if builds:
            return self._build(key, name, config, building)
        try:
            ended = building.done.wait(None if expires is None else max(expires - time.monotonic(), 0.0))
        finally:
            with self._lock:
                building.waiting -= 1
        if not ended:
            raise DeadlineExceededError(
                f"{name} was being built for another request until this one's deadline: "
                "try again shortly, or give a larger timeout"
            )
        if building.error is not None:
            raise building.error
        assert building.built is not None
        return building.built

    def _build(self, key: tuple[str, str], name: str, config: Any, building: _Building) -> _Built:
        """Build ``name`` with ``config`` for the request that started ``building``, keep it, and
        hand the requests waiting for it the method or the error."""
        try:
            models = Models(device=self.settings.device, dtype=self.settings.dtype, progress=False, build_indexes=False)
            building.built = _Built(registry.get(name).build(config, self.store, models), config, threading.Lock())
            return building.built
        except BaseException as e:
            building.error = e
            raise
        finally:
            with self._lock:  # kept and no longer building at once: a request finds one or the other
                if building.built is not None:
                    self._built[key] = building.built
                    while len(self._built) > self.settings.method_cache:
                        self._built.popitem(last=False)
                del self._building[key]
            building.done.set()

    def answer(self, request: AnswerRequest, expires: float | None = None) -> dict[str, Any]:
        """Answer the request's questions: one record per question, the run's summary, and the
        store and model seconds of the whole batch. ``expires``: the request's deadline, a
        :func:`time.monotonic` instant; it bounds the wait for the method (busy with another
        request) and the answering, which stops at its next check past it (:mod:`engine.deadlines`:
        a store or model call, a batch of prompts, a decoding step), freeing the method."""
        request.check()
        questions = request.batch()
        if len(questions) > self.settings.max_questions:
            raise InvalidInputError(
                f"{len(questions)} questions in one request; this server answers at most {self.settings.max_questions} "
                "(--max-questions): send them in smaller batches"
            )
        config = self.config(request.method, request.config)
        built = self.method(request.method, config, expires)
        records: list[dict[str, Any]] = []
        wait = -1 if expires is None else max(expires - time.monotonic(), 0.0)
        if not built.lock.acquire(timeout=wait):
            raise DeadlineExceededError(
                f"{request.method} was answering other requests until this one's deadline: "
                "try again shortly, or give a larger timeout"
            )
        try:
            summary = run_method(built.method, questions, progress=False, on_record=records.append, deadline=expires)
        finally:
            built.lock.release()
        name = built.method.name
        for record in records:
            record["trace"] = record.pop(name, {})
        seconds = {k: round(sum(r["seconds"][k] for r in records), 5) for k in ("store", "model", "other", "total")}
        return {"method": name, "config": asdict(config), "predictions": records, "seconds": seconds, "summary": summary}
