"""The probe forward that finds a model's structure, and the one place a model's family is settled at load."""

from __future__ import annotations

from typing import Any

import torch

from sinkscope.core import attention, chunked
from sinkscope.core.families import Family, family_of, known, register_found
from sinkscope.core.families.found import LINEAR, Probe, find

PROBE_IDS = torch.tensor([[5, 7, 11]])  # (batch, token): not the padding id 0, whose embedding is often zero


def find_family(model: Any) -> Family:
    """The family of a model about to be measured: its record, else its structure found once from the model (the
    structure is its type's code: found for one model, it holds for every model of that type)."""
    if not known(model.config):
        register_found(find(model, run_probe(model)))
    return family_of(model.config)


def run_probe(model: Any) -> Probe:
    """One three-token forward of ``model`` that notes every module called and every call of attention."""
    probe = Probe()

    def attend(module, query, key, value, mask, scaling=None, softcap=None, s_aux=None):  # noqa: ANN001, ANN202
        probe.softcap |= softcap is not None
        probe.learned_sinks |= s_aux is not None
        out, weights = chunked.eager(query, key, value, mask, scaling, softcap, s_aux)  # (1, token, head, head_dim)
        probe.attended.append((len(probe.calls), module, out.reshape(out.shape[1], -1)))  # (token, head * head_dim)
        return out, weights

    def called(module: torch.nn.Module, args: tuple) -> None:
        probe.calls.append(module)
        if isinstance(module, LINEAR) and args:
            probe.inputs.setdefault(id(module), args[0][0])  # (token, in_features)

    vocab = model.get_input_embeddings().num_embeddings
    hooks = [m.register_forward_pre_hook(called) for m in model.modules()]
    try:
        with attention.overriding(attend), torch.inference_mode():
            model(input_ids=PROBE_IDS.to(model.device) % vocab, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return probe
