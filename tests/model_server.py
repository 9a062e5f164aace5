"""A real OpenAI-compatible model server for the tests: ``transformers serve`` on the offline
default SmolLM2-135M-Instruct, from local files only (``HF_HUB_OFFLINE=1``), on a free loopback
port, stopped after.

``transformers serve`` cannot load the GGUF file itself: a config read from a GGUF file names
no architecture, and the server's model manager looks the model class up by
``config.architectures[0]`` (``TypeError: 'NoneType' object is not subscriptable``). So
:func:`start` first writes the model the engine loaded in process (the GGUF file de-quantised to
float32) as a transformers directory, and serves that: the server and the engine hold the same
weights.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.servers.base import LOOPBACK, ServerUnavailable, free_port, stop_process

#: seconds for the server to import, load the model and answer /health (a busy two-core machine)
START_TIMEOUT = 300.0


@dataclass
class ModelServer:
    process: subprocess.Popen
    base_url: str  # http://127.0.0.1:PORT/v1
    model: str  # the model id requests name (the served directory)
    log: Path

    @property
    def name(self) -> str:
        """The ``--model`` name of the served model: ``openai:MODEL@URL``."""
        return f"openai:{self.model}@{self.base_url}"

    def stop(self) -> None:
        stop_process(self.process, 10)


def save_directory(lm: Any, out: Path) -> Path:
    """The in-process model (:class:`engine.models.transformers_lm.TransformersLM`) written as a
    transformers directory, its weights as they are held (float32)."""
    lm.model.save_pretrained(out)
    lm.tokenizer.save_pretrained(out)
    return out


def start(workdir: Path, lm: Any) -> ModelServer:
    """``transformers serve`` on ``lm``'s weights, answering /health; ServerUnavailable saying
    what is missing when it cannot run here."""
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        raise ServerUnavailable("`transformers serve` needs fastapi, uvicorn, pydantic and openai: pip install -e '.[test]'")
    model = save_directory(lm, workdir / "model")
    port = free_port()
    log = workdir / "serve.log"
    command = [
        sys.executable, "-m", "transformers.cli.transformers", "serve", str(model),
        "--host", LOOPBACK, "--port", str(port), "--device", "cpu", "--dtype", "float32", "--log-level", "warning",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    with log.open("wb") as output:  # a session of its own, as spawn() starts one, so stop_process ends it all
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = ModelServer(process, f"http://{LOOPBACK}:{port}/v1", str(model), log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerUnavailable(f"`transformers serve` exited with {process.returncode}: {_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/health", timeout=5) as answer:
                if answer.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    server.stop()
    raise ServerUnavailable(f"`transformers serve` did not answer /health within {START_TIMEOUT:.0f} s: {_tail(log)}")


def _tail(log: Path, chars: int = 2000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"
