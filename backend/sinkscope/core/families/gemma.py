"""Gemma 1-3: Llama's names; Gemma-2 soft-caps its scores, Gemma-2 and 3 mix sliding-window and full layers.

Gemma scales its embeddings by sqrt(d_model) (Gemma 1 and 2 in the model's forward, Gemma-3 inside the embedding
module); h^0 is read where the first block receives it, so either way it is the scaled one. Gemma-2 and 3 normalize
each write before adding it.
"""

from sinkscope.core.families.base import Family

GEMMA = Family("Gemma", ("gemma",))
POST_NORMS = dict(attention_write="post_attention_layernorm", mlp_write="post_feedforward_layernorm")  # what is added
GEMMA2 = Family("Gemma-2", ("gemma2",), softcap=True, sliding_windows=True, **POST_NORMS)
GEMMA3 = Family("Gemma-3", ("gemma3_text", "gemma3"), sliding_windows=True, **POST_NORMS)

FAMILIES = (GEMMA, GEMMA2, GEMMA3)
