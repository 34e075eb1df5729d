"""A chunked attention function that reduces every head to its metrics while the forward runs.

Registered with transformers as ``sinkscope``. Outside a ``recording`` block it is plain SDPA,
so the shared model keeps no per-request state: each call finds its recorder in a context
variable that belongs to the calling thread.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

ATTENTION_NAME = "sinkscope"
ATTENTION_LABEL = "sinkscope (chunked eager, float32 softmax)"
CHUNK_ROWS = 128
HEAD_SUMS = ("sink", "diagonal", "previous_token", "entropy", "value_sink")


class StopForward(Exception):
    """Raised once the layer ``stop_after`` has stored its maps, so a recompute skips the rest."""


@dataclass
class Recorder:
    """What one forward pass collects. ``sums[name][layer]`` is a (head,) float64 tensor."""

    reduce: bool = True
    maps_of: frozenset[int] = frozenset()
    stop_after: int | None = None
    sums: dict[str, dict[int, torch.Tensor]] = field(default_factory=lambda: {k: {} for k in HEAD_SUMS})
    maps: dict[int, torch.Tensor] = field(default_factory=dict)
    norms: dict[int, torch.Tensor] = field(default_factory=dict)


_current: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("sinkscope_recorder", default=None)


@contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Route every attention call of this thread's forward passes into ``recorder``."""
    token = _current.set(recorder)
    try:
        yield recorder
    finally:
        _current.reset(token)


def output_weight(module: torch.nn.Module) -> torch.Tensor:
    """The attention output projection as (d_model, heads * head_dim), without its bias."""
    if hasattr(module, "o_proj"):
        return module.o_proj.weight
    if hasattr(module, "c_proj"):
        return module.c_proj.weight.T  # GPT-2's Conv1D stores (in, out)
    raise TypeError(f"{type(module).__name__} has no o_proj or c_proj output projection")


def value_norms(module: torch.nn.Module, value: torch.Tensor, n_heads: int) -> torch.Tensor:
    """n[h, j] = || v_j^h W_O^h ||, as (kv_head, group, key_pos) in float32."""
    n_kv, n_keys, head_dim = value.shape[1:]
    w = output_weight(module).float()
    w = w.reshape(w.shape[0], n_heads, head_dim)  # (d_model, head, head_dim)
    gram = torch.einsum("mhd,mhe->hde", w, w)  # (head, head_dim, head_dim): ||W v||^2 = v' W'W v
    gram = gram.reshape(n_kv, n_heads // n_kv, head_dim, head_dim)  # (kv_head, group, d, d)
    v = value[0].float().unsqueeze(1)  # (kv_head, 1, key_pos, head_dim)
    squared = (torch.matmul(v, gram) * v).sum(-1)  # (kv_head, group, key_pos)
    return squared.clamp_min(0).sqrt()


def allowed_keys(mask: torch.Tensor | None, n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """A (query_pos, key_pos) bool matrix of the keys each query may read."""
    if mask is None:
        rows = torch.arange(n_queries, device=device).unsqueeze(1) + (n_keys - n_queries)
        return torch.arange(n_keys, device=device).unsqueeze(0) <= rows
    mask = mask[0, 0]
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2  # float masks hold 0 or the dtype's minimum


def sinkscope_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Eager attention math, computed in query chunks against only the keys they can see."""
    recorder = _current.get()
    layer = getattr(module, "layer_idx", None)
    wanted = recorder is not None and (recorder.reduce or layer in recorder.maps_of)
    if not wanted and softcap is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if query.shape[0] != 1:
        raise ValueError("sinkscope attention analyzes one sequence at a time (batch size 1)")
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    n_heads, n_queries = query.shape[1], query.shape[2]
    n_kv, n_keys = key.shape[1], key.shape[2]
    group = n_heads // n_kv
    q = query[0].reshape(n_kv, group, n_queries, -1)  # (kv_head, group, query_pos, head_dim)
    k = key[0].unsqueeze(1)  # (kv_head, 1, key_pos, head_dim)
    v = value[0].unsqueeze(1)  # (kv_head, 1, key_pos, head_dim)
    allowed = allowed_keys(attention_mask, n_queries, n_keys, query.device)
    offset = n_keys - n_queries
    out = torch.empty(n_kv, group, n_queries, v.shape[-1], dtype=value.dtype, device=value.device)
    reducer = _Reducer(module, value, n_heads, allowed, offset) if wanted and recorder.reduce else None
    keep = None
    if wanted and layer in recorder.maps_of:
        keep = torch.zeros(n_kv, group, n_queries, n_keys, dtype=torch.float32, device=query.device)
    for q0 in range(0, n_queries, CHUNK_ROWS):
        q1 = min(q0 + CHUNK_ROWS, n_queries)
        end = offset + q1  # causal trimming: rows of this chunk see no key past `end`
        scores = torch.matmul(q[:, :, q0:q1], k[:, :, :end].transpose(-1, -2)) * scaling  # (kv, g, rows, keys)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        scores = scores.float().masked_fill(~allowed[q0:q1, :end], torch.finfo(torch.float32).min)
        weights = torch.softmax(scores, dim=-1)
        out[:, :, q0:q1] = torch.matmul(weights.to(value.dtype), v[:, :, :end])
        if reducer is not None:
            reducer.add(weights, scores, q0 + offset)
        if keep is not None:
            keep[:, :, q0:q1, :end] = weights
    if reducer is not None:
        reducer.store(recorder.sums, layer)
    if keep is not None:
        recorder.maps[layer] = keep.reshape(n_heads, n_queries, n_keys)  # (head, query_pos, key_pos)
        recorder.norms[layer] = value_norms(module, value, n_heads).reshape(n_heads, n_keys)  # (head, key_pos)
        if recorder.stop_after == layer:
            raise StopForward
    attn_output = out.reshape(1, n_heads, n_queries, -1).transpose(1, 2).contiguous()  # (1, query_pos, head, d)
    return attn_output, None


class _Reducer:
    """Running per-head sums of the metrics in shared/metrics.md, fed one chunk of rows at a time."""

    def __init__(
        self, module: torch.nn.Module, value: torch.Tensor, n_heads: int, allowed: torch.Tensor, offset: int
    ) -> None:
        self.norms = value_norms(module, value, n_heads)  # (kv_head, group, key_pos)
        visible = allowed.sum(-1).double()  # (query_pos,) keys each query can see
        self.log_visible = torch.where(visible > 1, visible.log(), torch.ones_like(visible))
        self.offset = offset
        shape = self.norms.shape[:2]
        self.sums = {k: torch.zeros(shape, dtype=torch.float64, device=value.device) for k in HEAD_SUMS}

    def add(self, weights: torch.Tensor, scores: torch.Tensor, first_row: int) -> None:
        """Accumulate rows ``first_row ..`` of this chunk; weights, scores: (kv, group, rows, keys)."""
        n_rows, n_keys = weights.shape[-2:]
        rows = torch.arange(first_row, first_row + n_rows, device=weights.device)
        in_q = (rows >= 1).double()  # row 0 trivially attends to itself
        from_two = (rows >= 2).double()  # previous_token starts at t=2
        index = rows.view(1, 1, -1, 1).expand(*weights.shape[:2], n_rows, 1)
        diagonal = weights.gather(-1, index).squeeze(-1)
        previous = weights.gather(-1, (index - 1).clamp_min(0)).squeeze(-1)
        entropy = torch.logsumexp(scores, -1) - (weights * scores).sum(-1)  # -sum a ln a, without a log pass
        entropy = entropy.double() / self.log_visible[rows - self.offset]
        norms = self.norms[:, :, :n_keys]
        read = torch.matmul(weights, norms.unsqueeze(-1)).squeeze(-1)  # sum_j A[t,j] n_j
        value_sink = weights[..., 0] * norms[:, :, :1] / read.clamp_min(1e-30)
        self.sums["sink"] += (weights[..., 0].double() * in_q).sum(-1)
        self.sums["diagonal"] += (diagonal.double() * in_q).sum(-1)
        self.sums["previous_token"] += (previous.double() * from_two).sum(-1)
        self.sums["entropy"] += (entropy * in_q).sum(-1)
        self.sums["value_sink"] += (value_sink.double() * in_q).sum(-1)

    def store(self, into: dict[str, dict[int, torch.Tensor]], layer: int) -> None:
        for name, total in self.sums.items():
            into[name][layer] = total.reshape(-1).cpu()  # (head,)


def eager_style_mask(*args: object, **kwargs: object) -> torch.Tensor | None:
    """SDPA's boolean mask, always materialized: the chunked path needs every sliding window."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Make ``attn_implementation="sinkscope"`` known to transformers (idempotent)."""
    AttentionInterface.register(ATTENTION_NAME, sinkscope_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_style_mask)

