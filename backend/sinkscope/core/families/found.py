"""A decoder family without a record: its structure found in the module tree by one probe forward, not guessed.

A three-token forward runs with forward pre-hooks on every module and an attention function that notes the module
transformers hands it. From the order of the calls:

- the decoder blocks are the ModuleList of the base model with one entry per layer;
- a block's attention is the module the attention function was handed inside it;
- the norm attention reads through is the last norm the block ran before its attention (none: post-norm);
- the output projection is the first linear map the attention ran after the attention function, heads x head_dim
  -> d_model;
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


@dataclass
class Probe:
    """What one forward pass ran, in order: every module, and each call of the attention function."""

    calls: list[torch.nn.Module] = field(default_factory=list)  # modules in the order their forward began
    attended: list[tuple[int, torch.nn.Module, int]] = field(default_factory=list)  # (call index, module, heads*dim)
    softcap: bool = False  # whether transformers handed the attention function a soft-cap ...
    learned_sinks: bool = False  # ... or a learned sink logit per head (s_aux)
    _under: dict[int, frozenset[int]] = field(default_factory=dict)

    def inside(self, module: torch.nn.Module, parent: torch.nn.Module) -> bool:
        """Whether ``module`` is ``parent`` or under it (each parent's modules listed once per probe)."""
        if id(parent) not in self._under:
            self._under[id(parent)] = frozenset(id(m) for m in parent.modules())
        return id(module) in self._under[id(parent)]


def find(model: Any) -> Family:
    """The structure of ``model`` found from one probe forward; a ModelLoadError naming what is missing."""
    config = model.config.get_text_config()
    name = type(model).__name__.removesuffix("ForCausalLM")  # as its modeling file writes it: Mixtral, StableLm
    probe = _probe(model)
    base = model.base_model
    blocks_name = _blocks(base, config.num_hidden_layers, name)
    blocks = base.get_submodule(blocks_name)
    _require_attention_in_every_block(probe, blocks, model, name)
    at, attention, width = next(entry for entry in probe.attended if probe.inside(entry[1], blocks[0]))
    return Family(
        name=name,
        model_types=(config.model_type,),
        blocks=blocks_name,
        input_norm=_read_norm(probe, blocks[0], at),
        final_norm=_final_norm(probe, base, blocks[-1]),
        attention=_path(blocks[0], attention),
        output_projection=_output_projection(probe, attention, at, width, config.hidden_size, name),
        conv1d_output=isinstance(_projection_module(probe, attention, at), Conv1D),
        rotary=False,  # positions are not found: a found family does not stream
        learned_sinks=probe.learned_sinks,
        softcap=probe.softcap,
        sliding_windows=any(Family(name, ()).sliding_layers(model.config)),
        tested=False,
        found=True,
    )


def _require_attention_in_every_block(probe: Probe, blocks: torch.nn.ModuleList, model: Any, name: str) -> None:
    """Refuse, saying which: a model with no attention, one computing it itself, or a hybrid (attention in some
    blocks, Mamba, linear attention or convolutions in the others)."""
    attending = [i for i, block in enumerate(blocks) if any(probe.inside(m, block) for _, m, _ in probe.attended)]
    if len(attending) == len(blocks):
        return
    if attending:
        raise ModelLoadError("error.found_hybrid", family=name, layers=attending, n=len(blocks))
    named = any("attention" in type(m).__name__.lower() or "attn" in type(m).__name__.lower() for m in model.modules())
    raise ModelLoadError("error.found_own_attention" if named else "error.found_no_attention", family=name)


def _probe(model: Any) -> Probe:
    from sinkscope.core import attention, chunked  # the kernel imports the families: import it only when probing

    probe = Probe()

    def attend(module, query, key, value, mask, scaling=None, softcap=None, s_aux=None):  # noqa: ANN001, ANN202
        probe.attended.append((len(probe.calls), module, query.shape[1] * value.shape[-1]))
        probe.softcap |= softcap is not None
        probe.learned_sinks |= s_aux is not None
        return chunked.eager(query, key, value, mask, scaling, softcap, s_aux)

    hooks = [m.register_forward_pre_hook(lambda module, _: probe.calls.append(module)) for m in model.modules()]
    try:
        with attention.overriding(attend), torch.inference_mode():
            model(input_ids=torch.zeros(1, 3, dtype=torch.long, device=model.device), use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return probe


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
    linear = (torch.nn.Linear, Conv1D)
    return next((m for m in probe.calls[attention_at:] if isinstance(m, linear) and probe.inside(m, attention)), None)


def _output_projection(probe: Probe, attention: torch.nn.Module, at: int, width: int, d_model: int, name: str) -> str:
    projection = _projection_module(probe, attention, at)
    if projection is None:
        raise ModelLoadError("error.found_missing", family=name, piece="output_projection")
    weight = projection.weight.T if isinstance(projection, Conv1D) else projection.weight  # (out, in)
    if tuple(weight.shape) != (d_model, width):
        raise ModelLoadError("error.found_missing", family=name, piece="output_projection")
    return _path(attention, projection)
