"""Llama and the families that share its module names (the default layout of ``Family``), Apertus all but one."""

from sinkscope.core.families.base import Family

LLAMA = Family("Llama", ("llama",))
MISTRAL = Family("Mistral", ("mistral",), sliding_windows=True)
QWEN2 = Family("Qwen2", ("qwen2",), sliding_windows=True)
QWEN3 = Family("Qwen3", ("qwen3",), sliding_windows=True)
GRANITE = Family("Granite", ("granite",))  # its multipliers are applied by the model or passed as ``scaling``
PHI3 = Family("Phi-3", ("phi3",), sliding_windows=True)  # fused qkv_proj; partial rotary is read off inv_freq

APERTUS = Family("Apertus", ("apertus",), input_norm="attention_layernorm")  # its norms named for what they feed

FAMILIES = (LLAMA, MISTRAL, QWEN2, QWEN3, GRANITE, PHI3, APERTUS)
