"""GPT-2: blocks in ``h``, LayerNorms ``ln_1``/``ln_f``, a Conv1D output projection, learned positions."""

from sinkscope.core.families.base import Family

GPT2 = Family(
    "GPT-2", ("gpt2",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn",
    output_projection="c_proj", conv1d_output=True, rotary=False,
)  # fmt: skip

FAMILIES = (GPT2,)
