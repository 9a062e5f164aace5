"""A tiny randomly initialised causal LM for training tests: a two-layer Llama from a config
and a character-level tokenizer, saved to a directory (nothing is downloaded)."""
from __future__ import annotations

import string
from pathlib import Path


def make_tiny_lm(path: Path) -> str:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", *string.printable[:95], "\n", "→", "←"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")  # one token per character
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return str(path)


def stop_while_saving_weights(monkeypatch) -> None:
    """Make every model's ``save_pretrained`` stop as a process stopped while it wrote the
    weights would: ``model.safetensors`` cut short, then ``KeyboardInterrupt``
    (``monkeypatch.undo()`` lets saves finish again)."""
    from transformers import PreTrainedModel

    real_save = PreTrainedModel.save_pretrained

    def weights_cut_short(self, folder, *args, **kwargs):
        real_save(self, folder, *args, **kwargs)
        weights = Path(folder) / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", weights_cut_short)


def stop_after_one_file_replaced(monkeypatch) -> None:
    """Make ``os.replace`` stop (``KeyboardInterrupt``) once it has moved one file, as a process
    stopped while a saved model's files replace a folder's own would."""
    import os

    real_replace, moved = os.replace, []

    def stopped_after_one_file(source, destination):
        if moved:
            raise KeyboardInterrupt
        real_replace(source, destination)
        moved.append(destination)

    monkeypatch.setattr(os, "replace", stopped_after_one_file)
