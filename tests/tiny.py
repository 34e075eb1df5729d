"""A tiny random Llama-family model saved as a local model directory, for fast app tests.

It has a real (small) byte-level BPE tokenizer with a BOS token, so every page runs on it exactly as on
the bundled model, in seconds; its numbers mean nothing, so tests of what the model does use SmolLM2.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    BloomConfig,
    BloomForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    JambaConfig,
    JambaForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)  # fmt: skip

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 400


def corpus() -> list[str]:
    """The app's example texts: enough to learn merges for what the tests type."""
    return [e["text"] for e in json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))]


def build_tiny_model_dir(folder: Path, family: str = "llama") -> Path:
    """Write config, random weights and tokenizer into ``folder``; returns it. ``family="gpt_oss"``: a tiny gpt-oss,
    its learned sink logits set to the size a trained model has (random ones near 0 take little); ``"jamba"``: a
    tiny hybrid, attention in every other layer; ``"bloom"``: a tiny Bloom, measured on the slow path."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="<s>")
    sizes = dict(
        vocab_size=bpe.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    if family == "gpt_oss":
        config = GptOssConfig(**sizes, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                              layer_types=["full_attention"] * 4, pad_token_id=tokenizer.bos_token_id)  # fmt: skip
        model = GptOssForCausalLM(config)
        for layer in model.model.layers:
            layer.self_attn.sinks.data = torch.linspace(0.0, 4.0, layer.self_attn.sinks.numel())
    elif family == "jamba":  # a hybrid: Mamba layers 0 and 2, attention layers 1 and 3
        config = JambaConfig(**sizes, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                             expert_layer_offset=1, num_experts=2, mamba_d_state=8, mamba_dt_rank=8,
                             use_mamba_kernels=False, pad_token_id=tokenizer.bos_token_id)  # fmt: skip
        model = JambaForCausalLM(config)
    elif family == "bloom":  # the slow path: ALiBi attention computed in Bloom's own code
        keep = {k: v for k, v in sizes.items() if k in ("vocab_size", "hidden_size", "bos_token_id", "eos_token_id")}
        model = BloomForCausalLM(BloomConfig(**keep, n_layer=4, n_head=4))
    else:
        model = LlamaForCausalLM(LlamaConfig(**sizes))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


WORDS = ["<unk>", "<s>", "the", "sink", "takes", "attention", "a", "head", ".", "&", "<b>"]


def word_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer of ``WORDS``, with a BOS token: each test word is one token."""
    vocab = {word: i for i, word in enumerate(WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>")


def build_word_model_dir(folder: Path) -> Path:
    """A tiny random GQA Llama (3 layers) with the word tokenizer, saved into ``folder``; returns it."""
    from tests.conftest import build_tiny

    build_tiny("llama-gqa", "eager").save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return folder
