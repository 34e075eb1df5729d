"""Tiny random models, in one module: every family's config (``MATRIX``, ``SLOW``) and builders for the tests that
check the engine against transformers' eager attention, and a tiny Llama saved as a local model directory for fast
app tests.

The directory's model has a real (small) byte-level BPE tokenizer with a BOS token, so every page runs on it exactly
as on the bundled model, in seconds; its numbers mean nothing, so tests of what the model does use SmolLM2.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
import transformers
from sinkscope.core import attention
from sinkscope.core.models import LoadedModel, check_capture, implementation_for, model_info
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    BloomConfig,
    BloomForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GptOssConfig,
    GptOssForCausalLM,
    JambaConfig,
    JambaForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)  # fmt: skip

from tests.helpers import ROOT

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
    build_tiny("llama-gqa", "eager").save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return folder


TINY_CONFIGS = {
    "llama-gqa": LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    ),
    "gpt2": GPT2Config(vocab_size=96, n_embd=64, n_layer=3, n_head=4, n_positions=512),
    "gemma3-sliding": Gemma3TextConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, sliding_window=5, max_position_embeddings=512,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
}  # fmt: skip


def build_tiny(name: str, implementation: str) -> torch.nn.Module:
    """A random tiny model; the same seed gives the same weights for every attention implementation."""
    attention.register()
    torch.manual_seed(0)
    config = copy.deepcopy(TINY_CONFIGS[name])  # from_config writes the implementation into its config
    model = AutoModelForCausalLM.from_config(config, attn_implementation=implementation)
    return model.eval().requires_grad_(False)


def tiny_loaded(name: str) -> LoadedModel:
    model = build_tiny(name, attention.ATTENTION_NAME)
    return LoadedModel(model, None, model_info(model, name, name))


SIZES = dict(
    vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2,
)  # fmt: skip


LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention"]


GPT_SIZES = dict(vocab_size=96, n_embd=64, n_layer=3, n_head=4, bos_token_id=1, eos_token_id=2)


OPT_SIZES = dict(
    vocab_size=96, hidden_size=64, ffn_dim=128, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=512,
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
)  # fmt: skip


MATRIX = {
    "llama": transformers.LlamaConfig(**SIZES),
    "mistral": transformers.MistralConfig(**SIZES, sliding_window=7),
    "qwen2": transformers.Qwen2Config(**SIZES),
    "qwen3": transformers.Qwen3Config(**SIZES, head_dim=16),
    "gemma": transformers.GemmaConfig(**SIZES, head_dim=16),
    "gemma2": transformers.Gemma2Config(**SIZES, head_dim=16, sliding_window=7, layer_types=LAYER_TYPES),
    "gemma3": transformers.Gemma3TextConfig(**SIZES, head_dim=16, sliding_window=7, layer_types=LAYER_TYPES),
    "gpt2": transformers.GPT2Config(**GPT_SIZES),
    "gpt_neox": transformers.GPTNeoXConfig(**SIZES),  # Pythia: parallel residual, a quarter of each head rotates
    "olmo2": transformers.Olmo2Config(**SIZES),
    "phi3": transformers.Phi3Config(**SIZES, partial_rotary_factor=0.5),
    "smollm3": transformers.SmolLM3Config(**SIZES, no_rope_layers=[1, 1, 0]),
    "granite": transformers.GraniteConfig(**SIZES, embedding_multiplier=3.0, attention_multiplier=0.2),
    "gpt_oss": transformers.GptOssConfig(
        **SIZES, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=7, layer_types=LAYER_TYPES
    ),
    "gpt_oss-full": transformers.GptOssConfig(
        **SIZES, head_dim=16, num_local_experts=4, num_experts_per_tok=2, layer_types=["full_attention"] * 3,
    ),  # streams: no sliding windows (YaRN rotary, as gpt-oss ships)
    "opt": transformers.OPTConfig(**OPT_SIZES, word_embed_proj_dim=64),
    "opt-350m": transformers.OPTConfig(**OPT_SIZES, word_embed_proj_dim=32, do_layer_norm_before=False),  # post-norm
    "phi": transformers.PhiConfig(**SIZES, partial_rotary_factor=0.5),  # phi-1, phi-2: parallel, partial rotary
    "gptj": transformers.GPTJConfig(**GPT_SIZES, rotary_dim=8),  # interleaved rotary on the first 8 dimensions
    "codegen": transformers.CodeGenConfig(**GPT_SIZES, rotary_dim=8),
    "gpt_bigcode": transformers.GPTBigCodeConfig(**GPT_SIZES, multi_query=True),  # one key and value for all heads
    "olmo3": transformers.Olmo3Config(**SIZES, sliding_window=7, layer_types=LAYER_TYPES),
    "apertus": transformers.ApertusConfig(**SIZES),
    # below: no record, the structure found at load (families.found)
    "mixtral": transformers.MixtralConfig(**SIZES, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": transformers.Qwen2MoeConfig(
        **SIZES, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32
    ),
    "olmoe": transformers.OlmoeConfig(**SIZES, num_experts=4, num_experts_per_tok=2),
    "cohere": transformers.CohereConfig(**SIZES),  # parallel attention and MLP, LayerNorm without bias
    "cohere2": transformers.Cohere2Config(**SIZES, sliding_window=7, layer_types=LAYER_TYPES),
    "stablelm": transformers.StableLmConfig(**SIZES),
    "starcoder2": transformers.Starcoder2Config(**SIZES),
    "glm4": transformers.Glm4Config(**SIZES, head_dim=16),  # a norm after attention as well as before it
    "granitemoe": transformers.GraniteMoeConfig(**SIZES, num_local_experts=4, num_experts_per_tok=2),
    "helium": transformers.HeliumConfig(**SIZES, head_dim=16),
    "internlm3": transformers.InternLM3Config(**SIZES, head_dim=16),
    "exaone4": transformers.Exaone4Config(**SIZES, sliding_window=7, layer_types=LAYER_TYPES),  # sliding, post-norm
    "seed_oss": transformers.SeedOssConfig(**SIZES, head_dim=16),
    "arcee": transformers.ArceeConfig(**SIZES),  # Llama's layout with a ReLU-squared MLP
    "llama4_text": transformers.Llama4TextConfig(**SIZES, head_dim=16, num_local_experts=2, intermediate_size_mlp=128),
    "hunyuan_v1_dense": transformers.HunYuanDenseV1Config(**SIZES, head_dim=16),
}  # fmt: skip


SLOW = {  # attention computed in the family's own code: measured from its eager weights (core.slow)
    "bloom": transformers.BloomConfig(vocab_size=96, hidden_size=64, n_layer=3, n_head=4, bos_token_id=1,
                                      eos_token_id=2),  # ALiBi
    "mpt": transformers.MptConfig(vocab_size=96, d_model=64, n_layers=3, n_heads=4, max_seq_len=512),  # ALiBi
    "falcon": transformers.FalconConfig(vocab_size=96, hidden_size=64, num_hidden_layers=3, num_attention_heads=4),
    "falcon-40b": transformers.FalconConfig(  # groups of queries with one key and value each, its own ln_attn
        vocab_size=96, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, new_decoder_architecture=True,
        num_kv_heads=2,
    ),
    "falcon-mha": transformers.FalconConfig(
        vocab_size=96, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, multi_query=False,
    ),
    "gpt_neo": transformers.GPTNeoConfig(
        vocab_size=96, hidden_size=64, num_layers=3, num_heads=4, window_size=7, bos_token_id=1, eos_token_id=2,
        attention_types=[[["global", "local"], 1], [["global"], 1]],
    ),  # its own attention classes; local layers see their last 7 tokens
}  # fmt: skip


N_TOKENS = 40


def build(name: str, implementation: str) -> torch.nn.Module:
    """The family's tiny model; the same seed gives the same weights for every attention implementation."""
    attention.register()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(copy.deepcopy(MATRIX[name]), attn_implementation=implementation)
    if name.startswith("gpt_oss"):  # random sink logits near 0 take little: make them the size a trained model has
        for layer in model.model.layers:
            layer.self_attn.sinks.data = torch.linspace(-1.0, 3.0, layer.self_attn.sinks.numel())
    return model.eval().requires_grad_(False)


def loaded_tiny(name: str, dtype: torch.dtype = torch.float32) -> LoadedModel:
    model = build(name, attention.ATTENTION_NAME).to(dtype)  # bfloat16: what a GPU user gets
    check_capture(model)
    return LoadedModel(model, None, model_info(model, name, name))


def eager_run(name: str, ids: list[int]) -> tuple[object, list[torch.Tensor]]:
    """transformers' eager output, and x^l: what each layer's attention module was given (hooked, not looked up)."""
    model, reads = build(name, "eager"), []
    hooks = [block.register_forward_pre_hook(_keep_input(reads), with_kwargs=True) for block in _attentions(model)]
    with torch.no_grad():
        output = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    return output, reads


def _attentions(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Each decoder block's attention module, found by its class name rather than by the adapter's lookups."""
    return [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")]


def _keep_input(into: list[torch.Tensor]) -> object:
    def keep(_module: object, args: tuple, kwargs: dict) -> None:
        into.append((args[0] if args else kwargs["hidden_states"])[0])

    return keep


def slow_loaded(name: str) -> LoadedModel:
    torch.manual_seed(0)
    config = copy.deepcopy(SLOW[name])
    model = AutoModelForCausalLM.from_config(config, attn_implementation=implementation_for(config))
    check_capture(model.eval().requires_grad_(False))
    return LoadedModel(model, None, model_info(model, name, name))
