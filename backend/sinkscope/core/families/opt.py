"""OPT (the StreamingLLM and massive-activations papers' models): blocks in ``decoder.layers``, learned positions,
output projection ``out_proj``. OPT-350m is post-norm (``do_layer_norm_before`` false): its attention reads h^l
raw, it has no final norm, and its head reads through a projection to a smaller width."""

from dataclasses import dataclass
from typing import Any

import torch

from sinkscope.core.families.base import Family


@dataclass(frozen=True)
class Opt(Family):
    def read_norms(self, model: Any) -> list[torch.nn.Module | None]:
        """Post-norm OPT reads every h^l raw; OPT-350m's head reads h^L through ``project_out`` (d_model ->
        word_embed_proj_dim), and so does h^L's cosine here."""
        decoder, n_layers = model.base_model.decoder, len(self.decoder_blocks(model))
        reads = super().read_norms(model) if model.config.do_layer_norm_before else [None] * (n_layers + 1)
        last = [m for m in (reads[-1], decoder.project_out) if m is not None]
        return [*reads[:-1], torch.nn.Sequential(*last) if last else None]


OPT = Opt(
    "OPT", ("opt",), blocks="decoder.layers", input_norm="self_attn_layer_norm", final_norm="decoder.final_layer_norm",
    output_projection="out_proj", rotary=False, mlp_write="fc2",
)  # fmt: skip

FAMILIES = (OPT,)
