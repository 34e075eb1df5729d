"""What Sinkscope must know about a decoder architecture, in one typed record per family.

Everything else (which ModuleList holds the blocks, the norm attention reads through, the output projection a
head writes with, the rotary embedding streaming turns back) is looked up here and nowhere else. The attention
itself needs no family knowledge: transformers passes it softcap, sliding windows and learned sinks as arguments,
and ``sinkscope.core.attention`` implements each one or refuses the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Family:
    """One decoder architecture. Names are paths in transformers' own modeling file (``decoder.layers``)."""

    name: str  # as people write it: "GPT-NeoX (Pythia)"
    model_types: tuple[str, ...]  # config.model_type values it covers
    blocks: str = "layers"  # path under the base model to the decoder blocks
    input_norm: str | None = "input_layernorm"  # the block's norm before attention; None: post-norm (reads h^l raw)
    final_norm: str | None = "norm"  # path under the base model; None: h^L is read raw
    attention: str = "self_attn"  # path under a block to its attention module
    output_projection: str = "o_proj"  # path under the attention module: heads -> d_model
    attention_write: str | None = None  # path under a block to what it adds after attention; None: the attention
    mlp_write: str = "mlp"  # path under a block to what it adds after its MLP (a norm after it, where it has one)
    conv1d_output: bool = False  # GPT-2's Conv1D stores its weight as (in, out)
    rotary: bool = True  # rotary positions turned as half-split pairs (else learned, absolute or interleaved ones)
    learned_sinks: bool = False  # a sink logit per head, passed to attention as ``s_aux``
    softcap: bool = False  # tanh soft-capping of the scores
    sliding_windows: bool = False  # some layers see only their last ``sliding_window`` keys
    tested: bool = True  # in the family matrix of tests/test_families.py
    found: bool = False  # its structure found in the module tree at load (``found.find``), not declared here
    attention_layers: tuple[int, ...] | None = None  # a hybrid's layers with attention; None: every layer has it
    slow: bool = False  # measured from the weights its eager forward returns (``core.slow``), not by the kernel

    def decoder_blocks(self, model: Any) -> torch.nn.ModuleList:
        return model.base_model.get_submodule(self.blocks)

    def read_norms(self, model: Any) -> list[torch.nn.Module | None]:
        """What attention applies to each h^l: layer l+1's input norm (None: it reads h^l raw), the final norm
        for h^L."""
        blocks = self.decoder_blocks(model)
        reads = [self.input_norm if self.input_norm and self.attends(i) else None for i in range(len(blocks))]
        firsts = [block.get_submodule(read) if read else None for block, read in zip(blocks, reads, strict=True)]
        return [*firsts, model.base_model.get_submodule(self.final_norm) if self.final_norm else None]

    def attends(self, layer: int) -> bool:
        """Whether ``layer`` has attention (a hybrid's Mamba, linear-attention or convolution layers have none)."""
        return self.attention_layers is None or layer in self.attention_layers

    def attention_of(self, block: torch.nn.Module) -> torch.nn.Module:
        return block.get_submodule(self.attention)

    def output_weight(self, attention: torch.nn.Module) -> torch.Tensor:
        """The attention output projection as (d_model, heads * head_dim), without its bias."""
        weight = attention.get_submodule(self.output_projection).weight
        return weight.T if self.conv1d_output else weight

    def rope_layers(self, config: Any) -> tuple[bool, ...]:
        """Per layer: whether its queries and keys are rotated."""
        return (self.rotary,) * config.num_hidden_layers

    def sliding_window(self, config: Any) -> int | None:
        """The keys a sliding layer sees."""
        return getattr(config.get_text_config(), "sliding_window", None)

    def sliding_layers(self, config: Any) -> tuple[bool, ...]:
        """Per layer: whether it sees only its last ``sliding_window`` keys (its mask says which)."""
        text = config.get_text_config()
        types = getattr(text, "layer_types", None)
        if types:
            return tuple(kind == "sliding_attention" for kind in types)
        return (getattr(text, "sliding_window", None) is not None,) * text.num_hidden_layers  # Mistral, Phi-3


@dataclass(frozen=True)
class Refused:
    """A family Sinkscope cannot measure exactly, and why."""

    name: str
    model_types: tuple[str, ...]
    reason: str  # catalogue key of the sentence that says why
