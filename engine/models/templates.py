"""Prompt templates of local language models: how a prompt is wrapped before it is tokenized.
``chat`` (the tokenizer's own chat template) and ``raw`` (the prompt as it is) are built in;
:data:`TEMPLATES` names the others (``llama2``, the format RoG's released checkpoint was trained
on), and any string with ``{prompt}`` is a template too. A fine-tuned model's directory records
the template it was trained with in :data:`TEMPLATE_FILE`, which :func:`saved_template` reads
back, so the model is prompted at run time as it was in training.
"""
from __future__ import annotations

from pathlib import Path

from engine.errors import InvalidInputError, clipped

#: a fine-tuned model's directory names the prompt template it was trained with in this file
TEMPLATE_FILE = "prompt_template.txt"

#: prompt templates by name; ``chat`` (the tokenizer's chat template) and ``raw`` are built in
TEMPLATES = {
    # the format RoG's released checkpoint (rmanluo/RoG, LLaMA-2-Chat) was trained on
    "llama2": "[INST] <<SYS>>\n<</SYS>>\n{prompt} [/INST]",
}


def check_template(template: str) -> str:
    """``template`` if a local model can prompt with it (``chat``, ``raw``, a name of
    :data:`TEMPLATES`, or a string with ``{prompt}`` and no other ``{…}`` field), else an error
    saying what it may be: a stray brace would fail only at the first prompt."""
    if template in ("chat", "raw") or template in TEMPLATES:
        return template
    if not isinstance(template, str) or "{prompt}" not in template:
        raise InvalidInputError(
            f"unknown prompt template {clipped(repr(template), 200)}: use chat, raw, {', '.join(TEMPLATES)} "
            "or a string with {prompt}"
        )
    try:
        template.format(prompt="")
    except (KeyError, IndexError, ValueError, AttributeError) as e:
        raise InvalidInputError(
            f"prompt template {clipped(repr(template), 200)} holds a brace field other than {{prompt}} ({e!r}): "
            "write a brace of the text itself twice, {{ or }}"
        ) from None
    return template


def saved_template(name_or_path: str) -> str | None:
    """The prompt template a fine-tuned model directory was trained with (:data:`TEMPLATE_FILE`), if any."""
    path = Path(name_or_path) / TEMPLATE_FILE
    return path.read_text(encoding="utf-8").strip() or None if path.is_file() else None
