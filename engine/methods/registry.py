"""The methods the engine serves: one line per method package, each exporting ``SPEC``
(:class:`engine.methods.spec.MethodSpec`). The command line, the benchmarks, the docs and the
tests find methods here and nowhere else.

A method package keeps its module-level imports light (no torch, no transformers): listing the
methods imports every package.
"""
from __future__ import annotations

import importlib

from engine.errors import InvalidInputError
from engine.methods.spec import MethodSpec

#: the method packages, in the order the command line and the docs list them
PACKAGES: tuple[str, ...] = (
    "engine.methods.rog",
    "engine.methods.ldr",
    "engine.methods.etd",
    "engine.methods.fidelis",
    "engine.methods.arg",
)

_extra: dict[str, MethodSpec] = {}


def specs() -> dict[str, MethodSpec]:
    """Every registered method by name: the packages above, then those added with :func:`register`."""
    found: dict[str, MethodSpec] = {}
    for package in PACKAGES:
        spec = importlib.import_module(package).SPEC
        found[spec.name] = spec
    return {**found, **_extra}


def names() -> list[str]:
    return list(specs())


def get(name: str) -> MethodSpec:
    """The spec of the method ``name``; an unknown name is refused, naming the known ones."""
    found = specs()
    if name not in found:
        raise InvalidInputError(f"unknown method {name!r}: use one of {', '.join(found)}")
    return found[name]


def register(spec: MethodSpec) -> None:
    """Add a method that lives outside the engine's packages (a plug-in, or a test's own)."""
    if spec.name in specs() and _extra.get(spec.name) is not spec:
        raise InvalidInputError(f"a method named {spec.name!r} is registered already")
    _extra[spec.name] = spec


def unregister(name: str) -> None:
    """Remove a method added with :func:`register`."""
    _extra.pop(name, None)


def parse_method_options(items: list[str]) -> dict[str, dict[str, str]]:
    """``["rog.model=m", "rog.k=2"]`` → ``{"rog": {"model": "m", "k": "2"}}`` (the command lines'
    ``--method-option METHOD.OPTION=VALUE``), each checked against its method's config now, so a
    typo fails before any work starts."""
    from engine.methods.spec import make_config

    found: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        method, dot, name = key.partition(".")
        if not sep or not dot or method not in names():
            raise InvalidInputError(
                f"--method-option {item!r}: write METHOD.OPTION=VALUE with METHOD one of {', '.join(names())}, "
                "e.g. rog.model=models/rog"
            )
        found.setdefault(method, {})[name] = value
    for method, values in found.items():
        make_config(get(method).config, values)
    return found
