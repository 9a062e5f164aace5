"""Serving an app with uvicorn: in the foreground (``kgqa serve``) or on a thread of its own
(tests, benchmarks)."""
from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from engine.errors import KGQAError
from engine.servers.base import LOOPBACK, free_port

#: seconds a background server may take to start listening
STARTUP_TIMEOUT = 30.0


def _config(app: Any, host: str, port: int) -> uvicorn.Config:
    # the app logs each request itself (engine.serve.access_log); uvicorn's own log only warns
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, server_header=False)


def run(app: Any, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` until Ctrl-C or SIGTERM."""
    uvicorn.Server(_config(app, host, port)).run()


class Background:
    """``app`` served on a thread of its own on a free loopback port, for a ``with`` block."""

    def __init__(self, app: Any, host: str = LOOPBACK, port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.server = uvicorn.Server(_config(app, host, self.port))
        self.thread = threading.Thread(target=self.server.run, name="kgqa-serve-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> Background:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise KGQAError(f"the HTTP server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(STARTUP_TIMEOUT)
