"""``kgqa serve``: the engine over HTTP (FastAPI + uvicorn, the ``serve`` extra).

:func:`engine.serve.app.create_app` builds the API over a store; :mod:`engine.serve.ops` maps
an operation and a JSON body to the store call without a web framework, for other front ends to
share. ``create_app`` and ``ServeSettings`` are importable from here too; FastAPI is imported
only when ``create_app`` is asked for."""
from __future__ import annotations

from typing import Any

from engine.serve.settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from engine.serve.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
