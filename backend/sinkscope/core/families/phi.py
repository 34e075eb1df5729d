"""Phi-1 and Phi-2: parallel attention and MLP on one ``input_layernorm``, a final ``final_layernorm``, output
projection ``dense``, partial rotary (``partial_rotary_factor``), optional q/k LayerNorms inside attention."""

from sinkscope.core.families.base import Family

PHI = Family("Phi (phi-1, phi-2)", ("phi",), final_norm="final_layernorm", output_projection="dense")

FAMILIES = (PHI,)
