"""GPT-2 and GPT-BigCode (StarCoder, SantaCoder): blocks in ``h``, LayerNorms ``ln_1``/``ln_f``, output projection
``c_proj`` (GPT-2's a Conv1D, BigCode's a Linear, its keys and values shared by every head), learned positions."""

from sinkscope.core.families.base import Family

GPT2 = Family(
    "GPT-2", ("gpt2",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn",
    output_projection="c_proj", conv1d_output=True, rotary=False,
)  # fmt: skip

GPT_BIGCODE = Family(
    "GPT-BigCode (StarCoder)", ("gpt_bigcode",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn",
    output_projection="c_proj", rotary=False,
)  # fmt: skip

FAMILIES = (GPT2, GPT_BIGCODE)
