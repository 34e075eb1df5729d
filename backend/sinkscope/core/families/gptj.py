"""GPT-J and CodeGen: GPT-2's names (blocks in ``h``, ``ln_1`` read by attention and MLP in parallel), output
projection ``out_proj``. Their rotary turns interleaved pairs (rotate_every_two), not the half-split pairs
streaming turns back, so they do not stream."""

from dataclasses import replace

from sinkscope.core.families.gpt2 import GPT_BIGCODE

GPTJ = replace(GPT_BIGCODE, name="GPT-J", model_types=("gptj",), output_projection="out_proj")
CODEGEN = replace(GPTJ, name="CodeGen", model_types=("codegen",))

FAMILIES = (GPTJ, CODEGEN)
