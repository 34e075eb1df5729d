"""GPT-2 and GPT-BigCode (StarCoder, SantaCoder): blocks in ``h``, LayerNorms ``ln_1``/``ln_f``, output projection
``c_proj`` (GPT-2's a Conv1D, BigCode's a Linear, its keys and values shared by every head), learned positions."""

from dataclasses import replace

from sinkscope.core.families.base import Family

GPT_BIGCODE = Family(
    "GPT-BigCode (StarCoder)", ("gpt_bigcode",), blocks="h", input_norm="ln_1", final_norm="ln_f", attention="attn",
    output_projection="c_proj", rotary=False,
)  # fmt: skip
GPT2 = replace(GPT_BIGCODE, name="GPT-2", model_types=("gpt2",), conv1d_output=True)

FAMILIES = (GPT2, GPT_BIGCODE)
