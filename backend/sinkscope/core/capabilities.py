"""What a loaded model can do, decided in one place: for each capability, None or the refusal (a ``ModelLoadError``
whose message says why). Experiments require a capability before they run; pages and the command line ask before
they offer one, and show the same sentence. ``LoadedModel.refusal`` and ``LoadedModel.require`` answer here."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from sinkscope.core.errors import ModelLoadError

TURNABLE_ROPE = ("default", "linear", "llama3", "yarn")  # angles linear in the position: R(t - d) = R(-d) R(t)


class Can(StrEnum):
    """A capability a page or an experiment needs of a model."""

    INTERVENE = "interventions"  # edit scores, states or writes during a forward pass
    STREAM = "streaming"  # a rolling KV cache whose sinks are turned back to their cache positions
    QUANTIZE_KV = "kv_quant"  # keys and values read through a quantized cache
    EVICT_KV = "kv_evict"  # tokens evicted, or one head restricted, token by token
    READ_WRITES = "writes"  # each block's attention and MLP write, and the QK split built on them


class LoadedModel(Protocol):
    """What the rules read of ``core.models.LoadedModel`` (named here, not imported: it answers through this module)."""

    model: Any
    info: Any
    family: Any

    @property
    def has_writes(self) -> bool: ...


def rope_kind(config: object, layer_type: str | None) -> str:
    """The rope type of a layer: one for the model, or one per layer type (Gemma-3's ``rope_parameters``)."""
    parameters = getattr(config, "rope_parameters", None) or {}
    parameters = parameters.get(layer_type, parameters) if layer_type else parameters
    return parameters.get("rope_type", "default")


def _intervene(loaded: LoadedModel) -> ModelLoadError | None:
    if loaded.family.slow:  # its attention runs in the family's own code, not Sinkscope's kernel
        return ModelLoadError("error.slow_intervention", family=loaded.info.family)
    return None


def _stream(loaded: LoadedModel) -> ModelLoadError | None:
    family, config = loaded.family, loaded.model.config.get_text_config()
    if family.found:  # its module names were found at load; its positions were not, and streaming turns them
        return ModelLoadError("error.streaming_found", family=family.name)
    types = getattr(config, "layer_types", None) or [None] * config.num_hidden_layers
    rope = getattr(loaded.model.base_model, "rotary_emb", None)
    if not family.rotary or rope is None or any(rope_kind(config, kind) not in TURNABLE_ROPE for kind in types):
        return ModelLoadError("error.streaming_model", model_type=family.name)
    return None


def _quantize_kv(loaded: LoadedModel) -> ModelLoadError | None:
    if loaded.family.slow:  # its attention runs in the family's own code: the quantizer would never see its cache
        return ModelLoadError("error.kv_slow", family=loaded.info.family)
    return None


def _evict_kv(loaded: LoadedModel) -> ModelLoadError | None:
    family = loaded.family
    if family.slow:
        return ModelLoadError("error.kv_slow", family=loaded.info.family)
    if family.attention_layers is not None or any(family.sliding_layers(loaded.model.config)):  # state, windows
        return ModelLoadError("error.evict_model", family=family.name)
    return None


def _read_writes(loaded: LoadedModel) -> ModelLoadError | None:
    if loaded.family.slow or not loaded.has_writes:  # a slow or hybrid family: its writes are not read
        return ModelLoadError("error.writes_unavailable", family=loaded.info.family)
    return None


RULES: dict[Can, Callable[[LoadedModel], ModelLoadError | None]] = {
    Can.INTERVENE: _intervene,
    Can.STREAM: _stream,
    Can.QUANTIZE_KV: _quantize_kv,
    Can.EVICT_KV: _evict_kv,
    Can.READ_WRITES: _read_writes,
}


def refusal(loaded: LoadedModel, capability: Can) -> ModelLoadError | None:
    """Why ``loaded`` cannot do ``capability`` here, or None."""
    return RULES[Can(capability)](loaded)
