"""The attention function Sinkscope registers with transformers (``sinkscope``), and the context it reads.

It runs the chunk loop (``chunked``) and reduces every head to its metrics while the forward runs (``reduce``).
Registered with transformers as ``sinkscope``. Outside a ``recording`` or ``changing`` block it is
plain SDPA, so the shared model keeps no per-request state: each call finds its recorder and its
change (an intervention) in context variables that belong to the calling thread.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from sinkscope.core.chunked import Kept, MaskFacts, chunked_attention
from sinkscope.core.errors import ModelLoadError
from sinkscope.core.families import Family, name_of
from sinkscope.core.reduce import HEAD_SUMS, Reducer, output_gram, projected_norms, value_norms

if TYPE_CHECKING:
    from sinkscope.core.writes import Writes

ATTENTION_NAME = "sinkscope"
ATTENTION_LABEL = "sinkscope (chunked eager, float32 softmax)"
# transformers' plumbing, safe to ignore: positions are already turned into q and k, and nothing here caches
PLUMBING = frozenset({"position_ids", "cache_position", "use_cache", "output_attentions", "output_router_logits"})
ScoreEdit = Callable[[int, torch.Tensor, torch.Tensor], None]  # (layer, scores, key position of each row), in place
ResidualEdit = Callable[[int, torch.Tensor], torch.Tensor]  # (index l of h^l, hidden) -> new hidden
T = TypeVar("T")


class Change(Protocol):
    """What an intervention may edit inside a forward pass (``sinkscope.experiments.interventions``); None: nothing."""

    edit_scores: ScoreEdit | None
    edit_residual: ResidualEdit | None

    def input_ids(self, ids: list[int]) -> list[int]: ...


class StopForward(Exception):
    """Raised once the layer ``stop_after`` has stored its maps, so a recompute skips the rest."""


@dataclass(frozen=True)
class QK:
    """One layer's attention inputs, as transformers handed them: enough to redo its weights."""

    query: torch.Tensor  # (1, head, query_pos, head_dim)
    key: torch.Tensor  # (1, kv_head, key_pos, head_dim)
    scaling: float
    mask: torch.Tensor | None  # the layer's own (causal or sliding) mask
    softcap: float | None  # Gemma-2's tanh soft-capping of the scores
    sink_logits: torch.Tensor | None  # (head,): gpt-oss's learned sink logit


@dataclass
class Recorder:
    """What one forward pass collects. ``sums[name][layer]`` is a (head,) float64 tensor."""

    reduce: bool = True
    maps_of: frozenset[int] = frozenset()
    stop_after: int | None = None
    pool: int | None = None  # also keep every layer's maps max-pooled to pool x pool
    residual: np.ndarray | None = None  # (layer + 1, token, d_model) float32: h^0..h^L, copied in by the hooks
    sums: dict[str, dict[int, torch.Tensor]] = field(default_factory=lambda: {k: {} for k in HEAD_SUMS})
    maps: dict[int, torch.Tensor] = field(default_factory=dict)
    norms: dict[int, torch.Tensor] = field(default_factory=dict)
    first_value_ratio: dict[int, torch.Tensor] = field(default_factory=dict)
    thumbnails: dict[int, torch.Tensor] = field(default_factory=dict)
    masks: dict[tuple, MaskFacts] = field(default_factory=dict)
    withheld: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos), kept maps only
    output_norms: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos)
    first_key: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos): A[t, 0]
    key_sums: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (key_pos,) float64: sum over heads
    # and later queries of A[t, j] (docs/metrics.md, key_sink)
    writes: Writes | None = None  # given: each block's attention and MLP writes land here (``core.writes``)
    qk_of: int | None = None  # given: that layer's queries and keys land in ``qk`` and the forward stops
    qk: QK | None = None  # that layer's queries, keys and what shapes their weights, as attention received them
    learned: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos), kept maps only:
    # the mass a learned sink logit (gpt-oss) takes from each row, 0 for plain softmax
    block_call: dict | None = None  # given: the first block's args and kwargs land here and the forward stops
    family: Family | None = None  # the model's (``LoadedModel.recorder``): where its output projection lives

    def mask_facts(
        self,
        mask: torch.Tensor | None,
        n_queries: int,
        n_keys: int,
        device: torch.device,
    ) -> MaskFacts:
        """Layers of one kind share one mask tensor: derive its facts once per forward pass."""
        key = (None if mask is None else mask.data_ptr(), n_queries, n_keys)
        if key not in self.masks:
            self.masks[key] = MaskFacts.of(mask, n_queries, n_keys, device)
        return self.masks[key]


_current: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("sinkscope_recorder", default=None)
Attend = Callable[..., tuple]
_override: contextvars.ContextVar[Attend | None] = contextvars.ContextVar("sinkscope_override", default=None)
_change: contextvars.ContextVar[Change | None] = contextvars.ContextVar("sinkscope_change", default=None)


def _within(variable: contextvars.ContextVar[T], value: T) -> AbstractContextManager[T]:
    """``value`` in this thread's ``variable`` for the length of a ``with`` block."""

    @contextmanager
    def block() -> Iterator[T]:
        token = variable.set(value)
        try:
            yield value
        finally:
            variable.reset(token)

    return block()


def changing(change: Change) -> AbstractContextManager[Change]:
    """Apply ``change`` to every forward pass this thread runs in the block (public: ``sinkscope.intervene``)."""
    return _within(_change, change)


def current_change() -> Change | None:
    """The intervention this thread's forward passes apply, if any."""
    return _change.get()


def overriding(attend: Attend) -> AbstractContextManager[Attend]:
    """Replace this thread's attention computation (streaming caches, geometry probes) for the block."""
    return _within(_override, attend)


def current_recorder() -> Recorder | None:
    """The recorder of the forward pass running in this thread, if any."""
    return _current.get()


def recording(recorder: Recorder) -> AbstractContextManager[Recorder]:
    """Route every attention call of this thread's forward passes into ``recorder``."""
    return _within(_current, recorder)


def sinkscope_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    sliding_window: int | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Eager attention math when recording (SDPA otherwise), in query chunks against the keys they see.

    ``sliding_window`` is honoured through the mask, which transformers builds per layer type; ``s_aux`` is
    gpt-oss's learned sink logit per head (head,). Any other argument is refused (``check_arguments``).
    """
    check_arguments(module, dropout, kwargs)
    override = _override.get()
    if override is not None:
        return override(module, query, key, value, attention_mask, scaling=scaling, softcap=softcap, s_aux=s_aux)
    recorder = _current.get()
    layer = getattr(module, "layer_idx", None)
    if recorder is not None and recorder.qk_of is not None and recorder.qk_of == layer:
        recorder.qk = QK(query, key, query.shape[-1] ** -0.5 if scaling is None else scaling, attention_mask, softcap,
                         s_aux)  # fmt: skip
        raise StopForward
    reduce = recorder is not None and recorder.reduce
    keep = recorder is not None and layer in recorder.maps_of
    pool = recorder.pool if recorder is not None else None
    change = _change.get()
    edit = partial(change.edit_scores, layer) if change is not None and change.edit_scores else None
    if not (reduce or keep or pool or edit) and softcap is None and s_aux is None:  # SDPA has neither
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if query.shape[0] != 1:
        raise ValueError("sinkscope attention analyzes one sequence at a time (batch size 1)")
    n_heads, n_queries, n_keys = query.shape[1], query.shape[2], key.shape[2]
    if recorder is not None:
        facts = recorder.mask_facts(attention_mask, n_queries, n_keys, query.device)
    else:
        facts = MaskFacts.of(attention_mask, n_queries, n_keys, query.device)
    if (reduce or keep) and recorder.family is None:
        raise ValueError("a recorder that measures needs the model's family: make it with loaded.recorder(...)")
    output_weight = recorder.family.output_weight(module) if reduce or keep else None
    reducer = Reducer(output_weight, value, n_heads, facts.log_visible) if reduce else None
    kept = Kept()
    if keep:
        kept.maps = torch.zeros(n_heads, n_queries, n_keys, device=query.device)
        kept.log_sum_exp = torch.zeros(n_heads, n_queries, device=query.device)
        kept.learned = torch.zeros(n_heads, n_queries, device=query.device)
    if reduce:  # every prefix's sink score is a mean of this column (the causal mask makes it exact)
        kept.first_key = torch.zeros(n_heads, n_queries, device=query.device)
    if pool:
        kept.thumbs = torch.zeros(n_heads, min(pool, n_queries), min(pool, n_keys), device=query.device)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    out = chunked_attention(query * scaling, key, value, facts, softcap, s_aux, reducer, kept, edit)
    if pool:
        recorder.thumbnails[layer] = kept.thumbs
    if reducer is not None:
        reducer.store(recorder.sums, layer)
        recorder.key_sums[layer] = reducer.key_sums
        recorder.first_key[layer] = kept.first_key
        if n_keys > 1:
            norms = reducer.norms.reshape(n_heads, n_keys).double()  # (head, key_pos)
            recorder.first_value_ratio[layer] = norms[:, 0] / norms[:, 1:].quantile(0.5, dim=-1)
    if keep:
        _keep_layer(recorder, output_weight, layer, kept, value, out)
    return out, None


def _keep_layer(
    recorder: Recorder, output_weight: torch.Tensor, layer: int, kept: Kept, value: torch.Tensor, out: torch.Tensor
) -> None:
    """Store one layer's maps with what the teaching views read off them, then stop if asked."""
    n_heads, head_dim = out.shape[2], out.shape[3]
    recorder.maps[layer] = kept.maps
    recorder.norms[layer] = value_norms(output_weight, value, n_heads).reshape(n_heads, -1)  # (head, key_pos)
    recorder.withheld[layer] = torch.sigmoid(-kept.log_sum_exp)  # softmax+1 would leave 1 / (1 + sum e^s) unread
    recorder.learned[layer] = kept.learned
    per_head = out[0].transpose(0, 1)  # (head, query_pos, head_dim)
    recorder.output_norms[layer] = projected_norms(per_head, output_gram(output_weight, n_heads, head_dim))
    if recorder.stop_after == layer:
        raise StopForward


def check_arguments(module: torch.nn.Module, dropout: float, kwargs: dict[str, object]) -> None:
    """Refuse an argument the kernel does not implement: one ignored silently would make every number wrong."""
    unknown = sorted(set(kwargs) - PLUMBING - {"is_causal"})  # is_causal=True: the mask already is causal
    unknown += ["is_causal"] * (kwargs.get("is_causal") is False) + ["dropout"] * bool(dropout)
    if unknown:
        config = getattr(module, "config", None)
        family = name_of(config) if config is not None else type(module).__name__
        raise ModelLoadError("error.attention_argument", family=family, argument=", ".join(unknown))


def eager_style_mask(*args: object, **kwargs: object) -> torch.Tensor | None:
    """SDPA's boolean mask, always materialized: the chunked path needs every sliding window."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Make ``attn_implementation="sinkscope"`` known to transformers (idempotent)."""
    AttentionInterface.register(ATTENTION_NAME, sinkscope_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_style_mask)
