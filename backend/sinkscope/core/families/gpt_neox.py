"""GPT-NeoX, the Pythia suite: parallel residual (attention and MLP both read h^l through their own norms),
partial rotary (``rotary_pct``: only the first dimensions of each head turn), output projection ``dense``."""

from sinkscope.core.families.base import Family

GPT_NEOX = Family(
    "GPT-NeoX (Pythia)", ("gpt_neox",), final_norm="final_layer_norm", attention="attention",
    output_projection="dense",
)  # fmt: skip

FAMILIES = (GPT_NEOX,)
