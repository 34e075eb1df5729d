"""Families that compute attention inside their own modules (Bloom's and MPT's ALiBi, GPT-Neo's own attention
classes): measured on the slow path (``sinkscope.core.slow``) from the weights their eager forward returns, each
head's values read from the projection that computes them."""

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

    def split_values(self, output: torch.Tensor, n_heads: int) -> torch.Tensor:
        """(token, head, head_dim) from the values map's (token, features) output."""
        return output.reshape(output.shape[0], n_heads, -1)


@dataclass(frozen=True)
class Bloom(Slow):
    def split_values(self, output: torch.Tensor, n_heads: int) -> torch.Tensor:
        fused = output.reshape(output.shape[0], n_heads, 3, -1)  # (token, head, q/k/v, head_dim), Bloom's layout
        return fused[:, :, 2]


@dataclass(frozen=True)
class Mpt(Slow):
    def split_values(self, output: torch.Tensor, n_heads: int) -> torch.Tensor:
        value = output.chunk(3, dim=-1)[2]  # (token, d_model): MPT's Wqkv stacks q, k and v
        return value.reshape(output.shape[0], n_heads, -1)


@dataclass(frozen=True)
class GptNeo(Slow):
    def sliding_layers(self, config: Any) -> tuple[bool, ...]:
        return tuple(kind == "local" for kind in config.attention_layers)

    def sliding_window(self, config: Any) -> int | None:
        return config.window_size


BLOOM = Bloom(
    "Bloom", ("bloom",), blocks="h", final_norm="ln_f", attention="self_attention", output_projection="dense",
    values="query_key_value",
)  # fmt: skip
MPT = Mpt(
    "MPT", ("mpt",), blocks="blocks", input_norm="norm_1", final_norm="norm_f", attention="attn",
    output_projection="out_proj", values="Wqkv",
)  # fmt: skip
GPT_NEO = GptNeo(
    "GPT-Neo", ("gpt_neo",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn.attention",
    output_projection="out_proj",
)  # fmt: skip

FAMILIES = (BLOOM, MPT, GPT_NEO)
