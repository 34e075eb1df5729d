"""Families that compute attention inside their own modules (Bloom's and MPT's ALiBi, Falcon's own kernels,
GPT-Neo's own attention classes): measured on the slow path (``sinkscope.core.slow``) from the weights their eager
forward returns, each head's values read from the projection that computes them."""

from dataclasses import dataclass
from typing import Any

import torch

from sinkscope.core.families.base import Family


@dataclass(frozen=True)
class Slow(Family):
    """A slow-path family: ``values`` is the path under the attention module to the map whose output holds V."""

    values: str = "v_proj"
    rotary: bool = False  # ALiBi or learned positions: nothing for streaming to turn
    slow: bool = True

    def split_values(self, output: torch.Tensor, attention: torch.nn.Module, n_heads: int) -> torch.Tensor:
        """(token, head, head_dim) from the values map's (token, features) output."""
        return output.reshape(output.shape[0], n_heads, -1)


@dataclass(frozen=True)
class Bloom(Slow):
    def split_values(self, output: torch.Tensor, attention: torch.nn.Module, n_heads: int) -> torch.Tensor:
        fused = output.reshape(output.shape[0], n_heads, 3, -1)  # (token, head, q/k/v, head_dim), Bloom's layout
        return fused[:, :, 2]


@dataclass(frozen=True)
class Mpt(Slow):
    def split_values(self, output: torch.Tensor, attention: torch.nn.Module, n_heads: int) -> torch.Tensor:
        value = output.chunk(3, dim=-1)[2]  # (token, d_model): MPT's Wqkv stacks q, k and v
        return value.reshape(output.shape[0], n_heads, -1)


@dataclass(frozen=True)
class Falcon(Slow):
    """Falcon's ``query_key_value`` in its three layouts (``FalconAttention._split_heads``): Falcon-40B/180B's groups
    of queries with one key and one value, Falcon-7B's one key and value for all heads, or Bloom's."""

    def split_values(self, output: torch.Tensor, attention: torch.nn.Module, n_heads: int) -> torch.Tensor:
        tokens, head_dim = output.shape[0], attention.head_dim
        if attention.new_decoder_architecture:
            group = n_heads // attention.num_kv_heads
            grouped = output.reshape(tokens, -1, group + 2, head_dim)  # (token, kv head, its queries + k + v, d)
            return grouped[:, :, -1].repeat_interleave(group, dim=1)
        if not attention.multi_query:
            return output.reshape(tokens, n_heads, 3, head_dim)[:, :, 2]
        return output.reshape(tokens, n_heads + 2, head_dim)[:, -1:].expand(tokens, n_heads, head_dim)

    def read_norms(self, model: Any) -> list[torch.nn.Module | None]:
        """Falcon-40B's attention reads its own ``ln_attn``; the others' the block's ``input_layernorm``."""
        blocks = self.decoder_blocks(model)
        firsts = [getattr(block, "ln_attn", None) or block.input_layernorm for block in blocks]
        return [*firsts, model.base_model.ln_f]


@dataclass(frozen=True)
class GptNeo(Slow):
    def sliding_layers(self, config: Any) -> tuple[bool, ...]:
        return tuple(kind == "local" for kind in config.attention_layers)

    def sliding_window(self, config: Any) -> int | None:
        return config.window_size


BLOOM_NAMES = {  # Falcon, built from Bloom's modeling file, keeps its names
    "blocks": "h", "final_norm": "ln_f", "attention": "self_attention", "output_projection": "dense",
    "values": "query_key_value",
}  # fmt: skip
BLOOM = Bloom("Bloom", ("bloom",), **BLOOM_NAMES)
MPT = Mpt(
    "MPT", ("mpt",), blocks="blocks", input_norm="norm_1", final_norm="norm_f", attention="attn",
    output_projection="out_proj", values="Wqkv",
)  # fmt: skip
FALCON = Falcon("Falcon", ("falcon",), **BLOOM_NAMES)
GPT_NEO = GptNeo(
    "GPT-Neo", ("gpt_neo",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn.attention",
    output_projection="out_proj",
)  # fmt: skip

FAMILIES = (BLOOM, MPT, FALCON, GPT_NEO)
