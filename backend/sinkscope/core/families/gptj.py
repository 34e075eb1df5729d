"""GPT-J and CodeGen: blocks in ``h``, one LayerNorm ``ln_1`` read by attention and MLP in parallel, output
projection ``out_proj``. Their rotary turns interleaved pairs (rotate_every_two), not the half-split pairs
streaming turns back, so they do not stream."""

from sinkscope.core.families.base import Family

GPTJ = Family(
    "GPT-J", ("gptj",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn",
    output_projection="out_proj", rotary=False,
)  # fmt: skip
CODEGEN = Family(
    "CodeGen", ("codegen",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn",
    output_projection="out_proj", rotary=False,
)  # fmt: skip

FAMILIES = (GPTJ, CODEGEN)
