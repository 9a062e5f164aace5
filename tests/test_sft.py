"""Supervised fine-tuning (engine.models.sft, ``kgqa lm train``) on a tiny randomly initialised
Llama built here from a config, with a character-level tokenizer saved beside it: nothing is
downloaded."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.cli.main import main
from engine.errors import InvalidInputError, KGQAWarning, ParseError
from engine.graph import Triple
from engine.models import run_folder
from engine.models.loading import load_lm
from engine.models.transformers_lm import DEFAULT_LM, TransformersLM
from engine.models.sft import (
    IGNORE,
    Sample,
    SftConfig,
    collate,
    encode,
    load_trainable,
    read_samples,
    save_model,
    target_loss,
    train,
    write_samples,
)
from engine.stores.oxigraph import OxigraphStore
from tests.cli_process import child_env
from tests.tiny_lm import make_tiny_lm, stop_after_one_file_replaced, stop_while_saving_weights

#: four prompts a two-layer model can learn by heart
MEMORISE = [Sample("q: red", "apple"), Sample("q: blue", "sky"), Sample("q: green", "grass!"), Sample("q: gold", "sun")]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_tiny_lm(tmp_path_factory.mktemp("tiny-llama"))


FAST = SftConfig(epochs=40, lr=1e-2, batch_size=2, warmup=0.0, schedule="constant", device="cpu")


# ----------------------------------------------------------------------------- data
def test_read_samples_names_the_file_and_line(tmp_path: Path):
    good = tmp_path / "good.jsonl"
    assert write_samples(MEMORISE, good) == {"": 4}  # samples per task
    assert read_samples(good) == MEMORISE
    tasked = [Sample("p", "t", "planning", "q1"), Sample("p", "u", "reasoning", "q1")]
    assert write_samples(tasked, tmp_path / "more" / "tasked.jsonl") == {"planning": 1, "reasoning": 1}
    assert read_samples(tmp_path / "more" / "tasked.jsonl") == tasked
    assert read_samples(tmp_path / "more" / "tasked.jsonl", ["reasoning"]) == tasked[1:]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "target": "b"}\n\n{"prompt": "a", "output": "b"}\n')
    with pytest.raises(ParseError, match=r"bad\.jsonl:3: .*'target'"):
        read_samples(bad)
    bad.write_text('{"prompt": "a", "target": "b"}\nnot json\n')
    with pytest.raises(ParseError, match=r"bad\.jsonl:2: not JSON"):
        read_samples(bad)
    bad.write_text('{"prompt": "a", "target": "b"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ParseError, match=r"bad\.jsonl:2: not JSON \(JSON nested too deep to read\)"):
        read_samples(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InvalidInputError, match=r"empty\.jsonl.*no samples"):
        read_samples(empty)
    with pytest.raises(InvalidInputError, match="missing.jsonl"):
        read_samples(tmp_path / "missing.jsonl")
    bad.write_bytes(b'{"prompt": "a", "target": "\xff"}\n')
    with pytest.raises(ParseError, match=r"bad\.jsonl: not UTF-8 text"):
        read_samples(bad)
    separated = [Sample("a\u2028b", "c\x85d", "", None)]  # raw in the file: only a newline ends a sample
    write_samples(separated, good)
    assert read_samples(good) == separated


def test_bad_settings_are_refused():
    with pytest.raises(InvalidInputError, match="validation fraction"):
        SftConfig(patience=2)
    with pytest.raises(InvalidInputError, match="epochs"):
        SftConfig(epochs=0)
    for bad, says in (({"lr": float("nan")}, "lr must be a number"), ({"lr": -1.0}, "lr must be a number"),
                      ({"weight_decay": float("inf")}, "weight decay"), ({"max_grad_norm": 0.0}, "the gradient norm"),
                      ({"lora": True, "lora_r": 0}, "a LoRA rank"), ({"lora": True, "lora_dropout": 1.0}, "the LoRA dropout")):
        with pytest.raises(InvalidInputError, match=f"fine-tuning settings: {says}"):
            SftConfig(**bad)
    assert SftConfig(lora_r=0).lora_r == 0  # without LoRA its settings are not read
    with pytest.raises(InvalidInputError, match="fine-tuning settings: schedule 'bogus' is not one of linear, cosine"):
        SftConfig(schedule="bogus")
    # a transformers schedule that needs more than the step counts is refused too, before any loading
    with pytest.raises(InvalidInputError, match="schedule 'cosine_with_min_lr' is not one of"):
        SftConfig(schedule="cosine_with_min_lr")


def test_lm_train_refuses_an_unknown_schedule_before_loading(tmp_path, capsys):
    from engine.cli.main import main

    data = tmp_path / "lm.jsonl"
    data.write_text('{"prompt": "a", "target": "b"}\n')
    with pytest.raises(SystemExit) as stopped:  # argparse's, before the data or a model is read
        main(["lm", "train", "--data", str(data), "--out", str(tmp_path / "out"), "--schedule", "bogus"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "argument --schedule: invalid choice: 'bogus'" in err and "'inverse_sqrt'" in err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- loss mask
def test_prompt_tokens_carry_no_loss(tiny):
    lm = TransformersLM.load(tiny, "cpu")
    sample = Sample("q: red", "apple")
    e = encode(lm, sample, 64)
    prompt = lm.prompt_ids(sample.prompt)
    assert e.ids == prompt + lm.encode("apple") + [lm.eos_token_id]
    assert e.labels == [IGNORE] * len(prompt) + lm.encode("apple") + [lm.eos_token_id]
    # cut to max_length: the target is cut, a prompt that fills it is skipped
    assert encode(lm, sample, len(prompt) + 2).labels == [IGNORE] * len(prompt) + lm.encode("ap")
    assert encode(lm, sample, len(prompt)) is None

    other = encode(lm, Sample("q: a longer prompt", "x"), 64)
    ids, mask, labels = collate([e, other], lm._pad, "cpu")
    with torch.no_grad():
        loss, n = target_loss(lm.model, ids, mask, labels)
        logits = lm.model(input_ids=ids, attention_mask=mask).logits
    assert n == len("apple") + 1 + len("x") + 1
    # the loss is the cross-entropy of the target tokens alone, each predicted by the position
    # before it, on the full vocabulary projection of every position (padding and prompt carry none)
    def expected(row: int, item) -> torch.Tensor:
        start = len(item.labels) - sum(label != IGNORE for label in item.labels)
        return sum(-torch.log_softmax(logits[row, start - 1 + i], -1)[tok]
                   for i, tok in enumerate(item.labels[start:]))

    assert float(loss) == pytest.approx(float(expected(0, e) + expected(1, other)), rel=1e-5)
    with torch.no_grad():
        alone = target_loss(lm.model, *collate([e], lm._pad, "cpu"))
    assert alone[1] == len("apple") + 1 and float(alone[0]) == pytest.approx(float(expected(0, e)), rel=1e-5)


def _saved_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The weights a training run saved in ``directory``."""
    import safetensors.torch

    return safetensors.torch.load_file(str(next(directory.glob("*.safetensors"))))


def test_bf16_autocast_trains_on_a_cpu(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from engine.models import device

    monkeypatch.setattr(device, "native_bf16", lambda name: True)  # as on a CPU with AVX-512 or AMX
    config = SftConfig(epochs=2, lr=5e-3, batch_size=2, device="cpu", precision="bf16")
    summary = train(MEMORISE, tiny, tmp_path / "bf16", config, progress=False)
    assert summary.device == "cpu (bf16)" and summary.train_loss[-1] < summary.train_loss[0]
    # the saved weights stay float32: only the arithmetic was bfloat16
    assert {t.dtype for t in _saved_weights(tmp_path / "bf16").values()} == {torch.float32}
    with pytest.raises(InvalidInputError, match="precision 'half'"):
        SftConfig(precision="half")


def test_bf16_trains_in_float32_where_the_device_has_no_bfloat16_arithmetic(tiny, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """There torch converts bf16 autocast in software, many times slower than float32: the same
    weights as a float32 run, and a warning that says why."""
    from engine.models import device

    monkeypatch.setattr(device, "native_bf16", lambda name: False)
    config = SftConfig(epochs=2, lr=5e-3, batch_size=2, device="cpu", precision="bf16")
    with pytest.warns(KGQAWarning, match="precision bf16: this CPU has no bfloat16 arithmetic .*: training in float32"):
        summary = train(MEMORISE, tiny, tmp_path / "asked-bf16", config, progress=False)
    plain = train(MEMORISE, tiny, tmp_path / "fp32", dataclasses.replace(config, precision="fp32"), progress=False)
    assert summary.device == plain.device == "cpu" and summary.train_loss == plain.train_loss
    assert summary.config["precision"] == "bf16"  # what was asked stays on record, beside the device it ran as
    asked, float32 = _saved_weights(tmp_path / "asked-bf16"), _saved_weights(tmp_path / "fp32")
    assert asked.keys() == float32.keys() and all(torch.equal(asked[k], float32[k]) for k in asked)


# ----------------------------------------------------------------------------- training
def test_training_memorises_and_the_saved_directory_loads(tiny, tmp_path: Path):
    out = tmp_path / "model"
    summary = train(MEMORISE, tiny, out, FAST, progress=False)
    assert summary.examples == 4 and summary.epochs == 40 and summary.device == "cpu"
    assert summary.target_tokens == sum(len(s.target) + 1 for s in MEMORISE)
    assert summary.train_loss[-1] < summary.train_loss[0] / 10
    assert json.loads((out / "sft-summary.json").read_text())["train_loss"] == summary.train_loss
    lm = load_lm(str(out), "cpu")
    for s in MEMORISE:
        assert lm.generate(s.prompt, max_new_tokens=12).text == s.target


def test_stop_condition_ends_generation(tiny, tmp_path: Path):
    out = tmp_path / "model"
    train([Sample("q: long", "(a (b c)) and more text")], tiny, out, FAST, progress=False)
    lm = load_lm(str(out), "cpu")
    assert lm.generate("q: long", max_new_tokens=40).text == "(a (b c)) and more text"
    stopped = lm.generate("q: long", max_new_tokens=40, stop=lambda text: text.endswith("))"))
    assert stopped.text == "(a (b c))"
    beams = lm.beam_search("q: long", num_beams=2, max_new_tokens=40, stop=lambda text: "(b" in text)
    assert beams[0].text == "(a (b"
    assert not any("(b" in b.text and not b.text.endswith("(b") for b in beams)  # no beam goes on past the stop


def test_resume_continues_as_an_uninterrupted_run(tiny, tmp_path: Path):
    # a constant learning rate: resuming with more epochs than first planned stretches a decaying schedule
    config = SftConfig(epochs=4, lr=5e-3, batch_size=2, device="cpu", val_fraction=0.25, schedule="constant", warmup=0.0)
    straight = train(MEMORISE * 2, tiny, tmp_path / "straight", config, progress=False)
    half = SftConfig(**{**config.__dict__, "epochs": 2})
    first = train(MEMORISE * 2, tiny, tmp_path / "resumed", half, progress=False)
    assert len(first.train_loss) == 2
    resumed = train(MEMORISE * 2, None, tmp_path / "resumed", config, resume=tmp_path / "resumed", progress=False)
    assert resumed.epochs == 4 and len(resumed.val_loss) == 4
    assert resumed.train_loss == pytest.approx(straight.train_loss, rel=1e-4)
    assert resumed.val_loss == pytest.approx(straight.val_loss, rel=1e-4)
    with pytest.raises(InvalidInputError, match="other samples"):
        train(MEMORISE, None, tmp_path / "other", config, resume=tmp_path / "resumed", progress=False)
    with pytest.raises(InvalidInputError, match="no fine-tuning checkpoint"):
        train(MEMORISE, tiny, tmp_path / "x", config, resume=tmp_path / "nothing", progress=False)


def test_an_interrupted_epoch_resumes_from_its_last_checkpoint_as_if_never_stopped(tiny, tmp_path: Path, monkeypatch):
    import engine.models.sft as sft

    # LoRA with heavy dropout: the resumed batches must also draw the dropout masks they would have
    config = SftConfig(epochs=2, lr=5e-3, batch_size=1, device="cpu", schedule="linear", warmup=0.0,
                       lora=True, lora_r=4, lora_alpha=8, lora_dropout=0.5)
    samples = MEMORISE * 2  # 8 batches an epoch
    straight = train(samples, tiny, tmp_path / "straight", config, progress=False, checkpoint_seconds=None)

    calls, real_loss = [0], sft.target_loss

    def stop_in_epoch_two(*args):
        calls[0] += 1
        if calls[0] == 8 + 6:  # the 6th batch of epoch 2: 5 of its batches are checkpointed
            raise KeyboardInterrupt
        return real_loss(*args)

    monkeypatch.setattr(sft, "target_loss", stop_in_epoch_two)
    with pytest.raises(KeyboardInterrupt):
        train(samples, tiny, tmp_path / "resumed", config, progress=False, checkpoint_seconds=0)
    monkeypatch.setattr(sft, "target_loss", real_loss)
    found = run_folder.find_checkpoint(tmp_path / "resumed")
    state = json.loads((found / "state.json").read_text())
    assert found.name == "checkpoint" and state["summary"]["epochs"] == 1
    assert state["part"]["epoch"] == 2 and state["part"]["batches"] == 5
    # the training it holds: epoch 1 and the part of epoch 2 (what a resumed recipe stage counts)
    assert sft.trained_seconds(tmp_path / "resumed") == pytest.approx(state["summary"]["epoch_seconds"][0] + state["part"]["seconds"])
    assert state["part"]["seconds"] > 0 and sft.trained_seconds(tmp_path / "nothing") == 0.0
    # and the CPU seconds the interrupted run used up to it
    assert sft.trained_cpu_seconds(tmp_path / "resumed") == state["cpu_seconds"] > 0
    assert sft.trained_cpu_seconds(tmp_path / "nothing") == 0.0

    # a save cut between its two renames leaves the previous checkpoint, which is found and used
    (found).rename(found.with_name("checkpoint.old"))
    resumed = train(samples, None, tmp_path / "resumed", config, resume=tmp_path / "resumed", progress=False)
    assert resumed.epochs == 2 and resumed.train_loss == pytest.approx(straight.train_loss, rel=1e-5)
    assert resumed.cpu_seconds > state["cpu_seconds"]  # the resumed run's and the interrupted one's
    weights = torch.load(tmp_path / "resumed" / "checkpoint" / "trainable.pt")
    reference = torch.load(tmp_path / "straight" / "checkpoint" / "trainable.pt")
    assert weights.keys() == reference.keys() and all(torch.allclose(weights[k], reference[k], atol=1e-6) for k in weights)

    # a checkpoint that does not record CPU seconds: the run's total is unknown, not this run's alone
    found = run_folder.find_checkpoint(tmp_path / "resumed")
    state = json.loads((found / "state.json").read_text())
    del state["cpu_seconds"]
    (found / "state.json").write_text(json.dumps(state))
    assert sft.trained_cpu_seconds(tmp_path / "resumed") is None
    longer = dataclasses.replace(config, epochs=3)
    assert train(samples, None, tmp_path / "resumed", longer, resume=tmp_path / "resumed", progress=False).cpu_seconds is None

    sft.remove_checkpoints(tmp_path / "resumed")
    assert run_folder.find_checkpoint(tmp_path / "resumed") is None


def test_early_stopping_keeps_the_best_epoch(tiny, tmp_path: Path):
    # a learning rate this high makes the validation loss worse after the first epochs
    config = SftConfig(epochs=30, lr=0.5, batch_size=2, device="cpu", val_fraction=0.5, patience=2, warmup=0.0)
    summary = train(MEMORISE * 2, tiny, tmp_path / "m", config, progress=False)
    assert summary.stopped == "patience"
    assert summary.epochs == summary.best_epoch + 2
    assert min(summary.val_loss) == summary.val_loss[summary.best_epoch - 1]


def test_lora_is_merged_on_save(tiny, tmp_path: Path, recwarn: pytest.WarningsRecorder):
    config = SftConfig(epochs=30, lr=2e-2, batch_size=2, device="cpu", lora=True, lora_r=8, warmup=0.0)
    summary = train(MEMORISE, tiny, tmp_path / "lora", config, progress=False)
    assert summary.lora and summary.train_loss[-1] < summary.train_loss[0]
    assert not (tmp_path / "lora" / "adapter_config.json").exists()
    adapter = tmp_path / "lora" / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == str(Path(tiny).resolve())
    # every linear layer, listed in a fixed order so that a rebuilt adapter's config is the same file
    assert len(adapter_config["target_modules"]) > 2 and adapter_config["target_modules"] == sorted(adapter_config["target_modules"])
    lm = load_lm(str(tmp_path / "lora"), "cpu")
    assert not any("lora" in name for name, _ in lm.model.named_parameters())
    base = TransformersLM.load(tiny, "cpu")
    # merged weights differ from the base where adapters were trained
    assert not torch.equal(lm.model.model.layers[0].self_attn.q_proj.weight, base.model.model.layers[0].self_attn.q_proj.weight)
    # the adapter alone is a model: its base with the adapter merged gives the merged model's logits
    from_adapter = load_lm.__wrapped__(str(adapter), "cpu")
    assert from_adapter.template == lm.template
    ids = torch.tensor([lm.prompt_ids("alpha beta")])
    with torch.no_grad():
        assert torch.allclose(from_adapter.model(ids).logits, lm.model(ids).logits, atol=1e-5)
    assert not any("lora" in name for name, _ in from_adapter.model.named_parameters())
    # peft's use of a deprecated transformers property is not the user's to see, training or loading
    assert not [str(w.message) for w in recwarn if "is_gradient_checkpointing" in str(w.message)]


def test_an_adapter_of_a_named_base_saves_without_a_warning(tiny, tmp_path: Path, recwarn: pytest.WarningsRecorder):
    # a recipe names its base as --model does (the offline default's name), not a folder peft could read
    lm = load_trainable(tiny, SftConfig(lora=True, lora_r=4, device="cpu"))
    save_model(lm, tmp_path / "m", base=DEFAULT_LM)
    assert json.loads((tmp_path / "m" / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == DEFAULT_LM
    assert not [str(w.message) for w in recwarn if "config file" in str(w.message)]


def test_cli_trains_from_jsonl(tiny, tmp_path: Path, capsys: pytest.CaptureFixture):
    data = tmp_path / "train.jsonl"
    write_samples(MEMORISE, data)
    main(["lm", "train", "--data", str(data), "--model", tiny, "--out", str(tmp_path / "cli"), "--epochs", "3",
          "--lr", "1e-2", "--batch-size", "2", "--device", "cpu", "--no-progress", "--json", "--prompt-template", "Q: {prompt} A:"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["examples"] == 4 and len(summary["train_loss"]) == 3
    lm = load_lm(str(tmp_path / "cli"), "cpu")
    assert lm.name == str(tmp_path / "cli")
    assert lm.template == "Q: {prompt} A:"  # the directory remembers the template it was trained with
    code = main(["lm", "train", "--data", str(data), "--model", tiny, "--out", str(tmp_path / "cli2"), "--device", "cpu",
                 "--no-progress", "--checkpoint-minutes", "-1"])
    assert code != 0 and "--checkpoint-minutes -1.0: give minutes >= 0" in capsys.readouterr().err


def test_lm_train_refuses_an_out_it_would_destroy_before_training(tiny, tmp_path: Path, capsys: pytest.CaptureFixture):
    import shutil

    data = tmp_path / "train.jsonl"
    write_samples(MEMORISE, data)
    base = tmp_path / "base"
    shutil.copytree(tiny, base)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")  # a model of the user's that fine-tuning did not write
    kept = {path: path.read_bytes() for path in (data, base / "model.safetensors", mine / "config.json")}
    store = tmp_path / "store"
    with OxigraphStore(str(store)) as made:
        made.add_triples([Triple("a", "r", "b")])
    for out, says in [(data, "is the input"), (base, "is the input"), (tmp_path, "holds the input"),
                      (base / "sub" / "out", "is inside the input folder"), (store / "sub" / "out", "is inside the store folder"),
                      (mine, "holds files that no fine-tuning wrote")]:
        code = main(["lm", "train", "--data", str(data), "--model", str(base), "--out", str(out), "--device", "cpu",
                     "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and says in err and repr(str(out)) in err and "--out" in err
        assert "epoch 1" not in err  # refused before any training
    assert not (base / "sub").exists() and not (store / "sub").exists()
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInputError, match="is a file: give --out a new folder"):
        train(MEMORISE, tiny, tmp_path / "notes.txt", FAST, progress=False)
    assert {path: path.read_bytes() for path in kept} == kept and (tmp_path / "notes.txt").read_text() == "mine"
    out = tmp_path / "run"  # an earlier fine-tuning's output is trained over again
    for _ in range(2):
        assert main(["lm", "train", "--data", str(data), "--model", tiny, "--out", str(out), "--device", "cpu",
                     "--no-progress"]) == 0


def test_a_row_of_megabytes_is_skipped_or_cut_without_being_tokenised(tiny, tmp_path: Path, monkeypatch):
    lm = load_trainable(tiny, SftConfig(device="cpu"))
    tokenised: list[int] = []
    original = type(lm.tokenizer).__call__
    monkeypatch.setattr(type(lm.tokenizer), "__call__", lambda self, text, *a, **k: tokenised.append(len(text)) or original(self, text, *a, **k))
    huge = "x" * 5_000_000
    assert encode(lm, Sample(huge, "a"), 64) is None
    cut = encode(lm, Sample("q", huge), 64)
    assert cut is not None and len(cut.ids) == 64
    assert max(tokenised) <= 64 * lm.longest_token + 100  # never the megabytes themselves
    # a prompt longer than the model reads is skipped as too long, not a failure of the whole run
    summary = train([*MEMORISE, Sample("y" * 9000, "z")], tiny, tmp_path / "out", dataclasses.replace(FAST, epochs=1, max_length=8192),
                    progress=False)
    assert summary.skipped == 1 and summary.examples == 4
    with pytest.raises(InvalidInputError, match="max length 9000 is longer than the 8,192 tokens"):
        train(MEMORISE, tiny, tmp_path / "long", dataclasses.replace(FAST, max_length=9000), progress=False)


def test_an_adapter_without_its_base_name_is_refused(tmp_path: Path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(InvalidInputError, match="base_model_name_or_path"):
        load_lm.__wrapped__(str(adapter), "cpu")


def test_no_progress_also_hides_the_model_loading_bar(tiny, tmp_path: Path):
    """``--no-progress`` hides transformers' "Loading weights" bar too, which a log file
    otherwise fills with; the same command without it shows that bar (both run at once)."""
    data = tmp_path / "train.jsonl"
    write_samples(MEMORISE, data)
    runs = {
        quiet: subprocess.Popen(
            [sys.executable, "-m", "engine.cli.main", "lm", "train", "--data", str(data), "--model", tiny, "--out",
             str(tmp_path / f"out-{quiet}"), "--epochs", "1", "--device", "cpu", *(["--no-progress"] if quiet else [])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
        for quiet in (True, False)
    }
    errors = {}
    for quiet, process in runs.items():
        _, errors[quiet] = process.communicate(timeout=120)
        assert process.returncode == 0, errors[quiet]
    assert "Loading weights" in errors[False]
    assert "Loading weights" not in errors[True] and "it/s]" not in errors[True], errors[True]


def test_a_run_stopped_while_saving_its_model_is_named_unfinished_until_resumed(tiny, tmp_path: Path, monkeypatch):
    import engine.models.sft as sft

    config = SftConfig(epochs=1, lr=5e-3, batch_size=2, device="cpu")
    out, real_save = tmp_path / "model", sft.save_model

    def cut_short(lm, out_dir, base=None):
        real_save(lm, out_dir, base)
        (Path(out_dir) / "model.safetensors").write_bytes(b"\0" * 16)  # the weights half written
        raise KeyboardInterrupt

    monkeypatch.setattr(sft, "save_model", cut_short)
    with pytest.raises(KeyboardInterrupt):
        train(MEMORISE, tiny, out, config, progress=False)
    monkeypatch.setattr(sft, "save_model", real_save)
    with pytest.raises(InvalidInputError, match=re.escape(f"is a fine-tuning run that has not finished (stopped in training, "
                                                          f"or while it saved its model): finish it with `kgqa lm train … --resume {out}`")):
        load_lm(str(out), "cpu")
    train(MEMORISE, None, out, config, resume=out, progress=False)
    assert load_lm(str(out), "cpu").generate(MEMORISE[0].prompt, max_new_tokens=2).text is not None


def test_a_finished_run_trained_again_and_stopped_while_saving_is_refused_until_resumed(tiny, tmp_path: Path, monkeypatch):
    import engine.models.sft as sft

    config = SftConfig(epochs=1, lr=5e-3, batch_size=2, device="cpu")
    out = tmp_path / "model"
    train(MEMORISE, tiny, out, config, progress=False)
    sft.remove_checkpoints(out)  # as a finished recipe stage leaves its folder
    finished = (out / "model.safetensors").read_bytes()
    stop_while_saving_weights(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        train(MEMORISE, tiny, out, dataclasses.replace(config, lr=1e-2), progress=False)
    monkeypatch.undo()
    assert (out / "model.safetensors").read_bytes() == finished and not (out / ".saving").exists()
    with pytest.raises(InvalidInputError, match=re.escape(f"has not finished (stopped in training, or while it saved its model): "
                                                          f"finish it with `kgqa lm train … --resume {out}`")):
        load_lm(str(out), "cpu")

    # stopped while the saved files replaced the folder's own: the staging folder left says so
    stop_after_one_file_replaced(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        train(MEMORISE, tiny, out, dataclasses.replace(config, lr=1e-2), progress=False)
    monkeypatch.undo()
    assert (out / ".saving").is_dir()
    for given, resume in [(out, out), (out / ".saving", out)]:
        with pytest.raises(InvalidInputError, match=re.escape(f"has not finished (stopped in training, or while it saved its model): "
                                                              f"finish it with `kgqa lm train … --resume {resume}`")):
            load_lm(str(given), "cpu")
    train(MEMORISE, tiny, out, dataclasses.replace(config, lr=1e-2), resume=out, progress=False)
    assert not (out / ".saving").exists() and (out / "sft-summary.json").is_file()
    assert load_lm(str(out), "cpu").generate(MEMORISE[0].prompt, max_new_tokens=2).text is not None
