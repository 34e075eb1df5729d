"""A decoder family without a record: its structure found in the module tree by one probe forward, not guessed.

The probe (``sinkscope.core.probe``) runs a three-token forward with forward pre-hooks on every module and an
attention function that notes the module transformers hands it and what it returned. From the order of the calls:

- the decoder blocks are the ModuleList of the base model with one entry per layer;
- a block's attention is the module the attention function was handed inside it; a hybrid's blocks without one
  (Mamba, linear attention, convolutions) are its layers without attention;
- the norm attention reads through is the last norm the block ran before its attention (none: post-norm);
- the output projection is the first linear map the attention ran after the attention function, heads x head_dim
  -> d_model, reading exactly what the function returned (else a gate or a norm lies between: refused);
- the final norm is the base model's norm that ran after the last block (none: h^L is read raw).

What cannot be found is refused naming the missing piece. Positions are not found: a found family does not stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.pytorch_utils import Conv1D

from sinkscope.core.errors import ModelLoadError
from sinkscope.core.families.base import Family

LINEAR = (torch.nn.Linear, Conv1D)


@dataclass
class Probe:
    """What one forward pass ran, in order: every module, and each call of the attention function."""

    calls: list[torch.nn.Module] = field(default_factory=list)  # modules in the order their forward began
    inputs: dict[int, torch.Tensor] = field(default_factory=dict)  # a linear map's id -> its first input
    # (call index, attention module, what the attention function returned as (token, head * head_dim))
    attended: list[tuple[int, torch.nn.Module, torch.Tensor]] = field(default_factory=list)
    softcap: bool = False  # whether transformers handed the attention function a soft-cap ...
    learned_sinks: bool = False  # ... or a learned sink logit per head (s_aux)
    _under: dict[int, frozenset[int]] = field(default_factory=dict)

    def inside(self, module: torch.nn.Module, parent: torch.nn.Module) -> bool:
        """Whether ``module`` is ``parent`` or under it (each parent's modules listed once per probe)."""
        if id(parent) not in self._under:
            self._under[id(parent)] = frozenset(id(m) for m in parent.modules())
        return id(module) in self._under[id(parent)]


def find(model: Any, probe: Probe) -> Family:
    """The structure of ``model`` found from its probe forward (``core.probe``); a ModelLoadError naming what is
    missing."""
    config = model.config.get_text_config()
    name = type(model).__name__.removesuffix("ForCausalLM")  # as its modeling file writes it: Mixtral, StableLm
    base = model.base_model
    blocks_name = _blocks(base, config.num_hidden_layers, name)
    blocks = base.get_submodule(blocks_name)
    attending = _attention_layers(probe, blocks, model, name)
    block = blocks[attending[0]]
    at, attention, written = next(entry for entry in probe.attended if probe.inside(entry[1], block))
    return Family(
        name=name,
        model_types=(model.config.model_type,),
        blocks=blocks_name,
        input_norm=_read_norm(probe, block, at),
        final_norm=_final_norm(probe, base, blocks[-1]),
        attention=_path(block, attention),
        output_projection=_output_projection(probe, attention, at, written, config.hidden_size, name),
        conv1d_output=isinstance(_projection_module(probe, attention, at), Conv1D),
        rotary=False,  # positions are not found: a found family does not stream
        learned_sinks=probe.learned_sinks,
        softcap=probe.softcap,
        sliding_windows=any(Family(name, ()).sliding_layers(model.config)),
        tested=False,
        found=True,
        attention_layers=None if len(attending) == len(blocks) else tuple(attending),
    )


def _attention_layers(probe: Probe, blocks: torch.nn.ModuleList, model: Any, name: str) -> list[int]:
    """The blocks that call attention: every one, or a hybrid's (Mamba, linear attention or convolutions in the
    others). None is refused, saying which: a model with no attention, or one computing it itself."""
    attending = [i for i, block in enumerate(blocks) if any(probe.inside(m, block) for _, m, _ in probe.attended)]
    if attending:
        return attending
    named = any("attention" in type(m).__name__.lower() or "attn" in type(m).__name__.lower() for m in model.modules())
    raise ModelLoadError("error.found_own_attention" if named else "error.found_no_attention", family=name)


def _blocks(base: torch.nn.Module, n_layers: int, name: str) -> str:
    lists = [path for path, m in base.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers]
    if len(lists) != 1:
        raise ModelLoadError("error.found_missing", family=name, piece="blocks")
    return lists[0]


def _path(parent: torch.nn.Module, module: torch.nn.Module) -> str:
    return next(path for path, m in parent.named_modules() if m is module)


def _is_norm(module: torch.nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def _read_norm(probe: Probe, block: torch.nn.Module, attention_at: int) -> str | None:
    """The last norm of the block that ran before its attention was called (None: attention reads h^l raw)."""
    start = next(i for i, m in enumerate(probe.calls) if m is block)
    before = [m for m in probe.calls[start:attention_at] if _is_norm(m) and probe.inside(m, block)]
    owned = [m for m in before if not any(probe.inside(m, a) for _, a, _ in probe.attended)]  # not a q/k norm
    return _path(block, owned[-1]) if owned else None


def _final_norm(probe: Probe, base: torch.nn.Module, last_block: torch.nn.Module) -> str | None:
    last = max(i for i, m in enumerate(probe.calls) if m is last_block)
    after = [m for m in probe.calls[last:] if _is_norm(m) and probe.inside(m, base) and not probe.inside(m, last_block)]
    return _path(base, after[0]) if after else None


def _projection_module(probe: Probe, attention: torch.nn.Module, attention_at: int) -> torch.nn.Module | None:
    return next((m for m in probe.calls[attention_at:] if isinstance(m, LINEAR) and probe.inside(m, attention)), None)


def _output_projection(
    probe: Probe, attention: torch.nn.Module, at: int, written: torch.Tensor, d_model: int, name: str
) -> str:
    """The first linear map after the attention function, if it maps heads x head_dim to d_model and reads exactly
    what attention wrote: the value metrics weigh each head by its W_O^h, which a gate or a norm between would
    change."""
    projection = _projection_module(probe, attention, at)
    if projection is None:
        raise ModelLoadError("error.found_missing", family=name, piece="output_projection")
    weight = projection.weight.T if isinstance(projection, Conv1D) else projection.weight  # (out, in)
    if tuple(weight.shape) != (d_model, written.shape[-1]):
        raise ModelLoadError("error.found_missing", family=name, piece="output_projection")
    read = probe.inputs[id(projection)]
    if read.shape != written.shape or not torch.allclose(read.float(), written.float(), rtol=1e-4, atol=1e-6):
        raise ModelLoadError("error.found_transformed", family=name)
    return _path(attention, projection)
