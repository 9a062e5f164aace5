"""A GGUF file converted once and kept (engine.models.gguf_conversion): the kept checkpoint is the
file's model weight for weight and its tokenizer token for token; a changed file converts again;
a cache that cannot be written or a damaged conversion still gives the model, with a warning."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine.models import gguf_conversion
from engine.models.loading import default_lm_path

TEXTS = [
    "who directed [The Prowler]?",
    "film.film.directed_by",
    " leading space and  two\tkinds\nof blanks",
    "ünïcödé, 日本語 and an emoji 🎬",
    "<|im_start|>user\nnot a real turn<|im_end|>",
    "",
]


@pytest.fixture(scope="module")
def from_file() -> tuple[Any, Any]:
    """The offline default's tokenizer and model as transformers reads them from the GGUF file."""
    return gguf_conversion._read_file(Path(default_lm_path()))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(gguf_conversion.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _same_model(a: tuple[Any, Any], b: tuple[Any, Any]) -> None:
    import torch

    (tokenizer_a, model_a), (tokenizer_b, model_b) = a, b
    weights_a, weights_b = model_a.state_dict(), model_b.state_dict()
    assert weights_a.keys() == weights_b.keys()
    assert all(weights_a[k].dtype == weights_b[k].dtype == torch.float32 for k in weights_a)
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    settings = [{k: v for k, v in m.config.to_diff_dict().items() if k != "architectures"} for m in (model_a, model_b)]
    assert settings[0] == settings[1]  # saving names the architecture, which the GGUF file leaves out
    for text in TEXTS:
        assert tokenizer_a(text).input_ids == tokenizer_b(text).input_ids
        assert tokenizer_a(text, add_special_tokens=False).input_ids == tokenizer_b(text, add_special_tokens=False).input_ids
    turn = [{"role": "user", "content": TEXTS[0]}]
    assert tokenizer_a.apply_chat_template(turn, tokenize=False, add_generation_prompt=True) == \
        tokenizer_b.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
    special = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "padding_side")
    assert [getattr(tokenizer_a, s) for s in special] == [getattr(tokenizer_b, s) for s in special]
    assert len(tokenizer_a) == len(tokenizer_b)


@pytest.mark.model
def test_the_kept_conversion_is_the_files_model_and_later_loads_read_it(from_file, cache, monkeypatch):
    gguf = Path(default_lm_path())
    assert not getattr(from_file[1], "is_quantized", False)  # ordinary float32 weights, trainable and savable
    read = []
    monkeypatch.setattr(gguf_conversion, "_read_file", lambda path: read.append(path) or from_file)  # the file read once
    assert gguf_conversion.read_gguf(gguf) == from_file and read == [gguf]
    kept = gguf_conversion.converted_dir(gguf)
    assert kept.parent == cache / "gguf" and (kept / "model.safetensors").is_file()
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no scratch folder left beside it
    again = gguf_conversion.read_gguf(gguf)
    assert read == [gguf]  # not read from the file again
    _same_model(from_file, again)
    assert json.loads((kept / gguf_conversion.SOURCE_FILE).read_text()) == gguf_conversion._identity(gguf)


@pytest.mark.model
def test_a_new_conversion_removes_those_no_load_can_use_again(from_file, cache, tmp_path, monkeypatch):
    gguf = Path(default_lm_path())
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF other")
    now, gone = gguf_conversion._identity(gguf), dict(gguf_conversion._identity(other), path=str(tmp_path / "gone.gguf"))
    planted = {
        "same-file-older": dict(now, mtime_ns=now["mtime_ns"] - 1),  # this file before it changed
        "same-file-other-transformers": dict(now, transformers="0.0"),
        "other-file": gguf_conversion._identity(other),  # another file, as it is: another checkout's
        "other-file-changed": dict(gguf_conversion._identity(other), size=1),
        "file-gone": gone,
        f"{gguf.stem}-0123456789abcdef": None,  # kept before conversions named their file
        "another-name-0123456789abcdef": None,
    }
    for name, source in planted.items():
        (cache / "gguf" / name).mkdir(parents=True)
        if source is not None:
            (cache / "gguf" / name / gguf_conversion.SOURCE_FILE).write_text(json.dumps(source))
    monkeypatch.setattr(gguf_conversion, "_read_file", lambda path: from_file)
    gguf_conversion.read_gguf(gguf)
    kept = gguf_conversion.converted_dir(gguf)
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == sorted([kept.name, "other-file", "another-name-0123456789abcdef"])


def test_a_changed_file_is_converted_again(tmp_path, cache):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF one")
    kept = gguf_conversion.converted_dir(gguf)
    assert kept == gguf_conversion.converted_dir(gguf) and kept.name.startswith("model-")
    os.utime(gguf, ns=(1, 1))
    touched = gguf_conversion.converted_dir(gguf)
    gguf.write_bytes(b"GGUF, two")
    os.utime(gguf, ns=(1, 1))
    assert len({kept, touched, gguf_conversion.converted_dir(gguf)}) == 3
    assert gguf_conversion.converted_dir(tmp_path / ".." / tmp_path.name / "model.gguf") == gguf_conversion.converted_dir(gguf)


@pytest.mark.model
def test_an_unwritable_cache_still_gives_the_model_and_says_so(from_file, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(gguf_conversion.CACHE_ENV, str(blocker))
    monkeypatch.setattr(gguf_conversion, "_read_file", lambda path: from_file)
    with pytest.warns(UserWarning, match="every load converts it again.*KGQA_CACHE_DIR"):
        assert gguf_conversion.read_gguf(Path(default_lm_path())) == from_file  # the very objects read


@pytest.mark.model
@pytest.mark.parametrize("damage", ["config", "weights"])
def test_a_damaged_conversion_is_converted_again(from_file, cache, monkeypatch, damage):
    gguf = Path(default_lm_path())
    damaged = gguf_conversion.converted_dir(gguf)
    damaged.mkdir(parents=True)
    if damage == "config":
        (damaged / "config.json").write_text("{not json")
    else:  # a whole checkpoint but for its weights, cut short
        from_file[0].save_pretrained(damaged)
        from_file[1].config.save_pretrained(damaged)
        (damaged / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    monkeypatch.setattr(gguf_conversion, "_read_file", lambda path: from_file)
    with pytest.warns(UserWarning, match="does not load"):
        assert gguf_conversion.read_gguf(gguf) == from_file  # the very objects read
    _same_model(from_file, gguf_conversion._read_checkpoint(damaged))


@pytest.mark.model
def test_a_conversion_that_cannot_be_written_out_still_gives_the_model(from_file, cache, monkeypatch):
    def full_disk(tokenizer, model, target, source):
        raise RuntimeError("Error while serializing: IoError(No space left on device)")  # as safetensors says it

    monkeypatch.setattr(gguf_conversion, "_read_file", lambda path: from_file)
    monkeypatch.setattr(gguf_conversion, "_keep", full_disk)
    with pytest.warns(UserWarning, match="No space left on device.*every load converts it again"):
        assert gguf_conversion.read_gguf(Path(default_lm_path())) == from_file


@pytest.mark.model
def test_a_conversion_kept_first_by_another_process_is_the_one_kept(from_file, tmp_path):
    target = tmp_path / "kept"
    gguf_conversion._keep(*from_file, target, {"path": "model.gguf"})
    written = (target / "model.safetensors").stat().st_mtime_ns
    gguf_conversion._keep(*from_file, target, {"path": "model.gguf"})  # the rename finds the folder there: this copy is dropped
    assert (target / "model.safetensors").stat().st_mtime_ns == written
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]


def test_a_read_parses_the_file_once_and_leaves_gguf_as_it_was(monkeypatch):
    import gguf

    made: list[tuple] = []

    class Reader:  # stands in for gguf's reader, counting what it is asked to parse
        def __init__(self, path: str, mode: str = "r") -> None:
            made.append((path, mode))

    monkeypatch.setattr(gguf, "GGUFReader", Reader)
    own = gguf.get_tensor_name_map
    with gguf_conversion._parsed_once():
        first, again, other = gguf.GGUFReader("a.gguf"), gguf.GGUFReader("a.gguf"), gguf.GGUFReader("b.gguf")
        assert first is again and other is not first and made == [("a.gguf", "r"), ("b.gguf", "r")]
        assert gguf.get_tensor_name_map is not own
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (Reader, own)
    with pytest.raises(ValueError, match="a failed read"), gguf_conversion._parsed_once():
        raise ValueError("a failed read")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (Reader, own)  # restored on an error too


@pytest.mark.parametrize("bars", [True, False])
def test_the_bar_over_the_gguf_tensors_obeys_transformers_switch(bars, capfd):
    from transformers import modeling_gguf_pytorch_utils as reading
    from transformers.utils import logging

    own, was_on = reading.tqdm, logging.is_progress_bar_enabled()
    (logging.enable_progress_bar if bars else logging.disable_progress_bar)()
    try:
        with gguf_conversion._bar_follows_transformers():
            assert list(reading.tqdm(range(3), desc="Converting GGUF tensors")) == [0, 1, 2]
    finally:
        (logging.enable_progress_bar if was_on else logging.disable_progress_bar)()
    assert ("Converting GGUF tensors" in capfd.readouterr().err) is bars
    assert reading.tqdm is own
