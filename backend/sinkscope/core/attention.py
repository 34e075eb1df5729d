"""A chunked attention function that reduces every head to its metrics while the forward runs.

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
from typing import Protocol, TypeVar

import numpy as np
import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from sinkscope.core.arrays import bin_index
from sinkscope.core.errors import ModelLoadError
from sinkscope.core.families import family_of
from sinkscope.core.names import HEAD

ATTENTION_NAME = "sinkscope"
ATTENTION_LABEL = "sinkscope (chunked eager, float32 softmax)"
CHUNK_ROWS = 64
HEAD_SUMS = tuple(m.name for m in HEAD if m.name != "value_norm_ratio")  # summed over rows by _Reducer.finish
NOTED = ("row_max_score", "row_max_weight", "weighted_score", "on_self", "on_previous", "learned")  # per row
MIN_SCORE = torch.finfo(torch.float32).min  # a blocked key: its softmax weight is exactly 0
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


@dataclass
class Recorder:
    """What one forward pass collects. ``sums[name][layer]`` is a (head,) float64 tensor."""

    reduce: bool = True
    maps_of: frozenset[int] = frozenset()
    stop_after: int | None = None
    pool: int | None = None  # also keep every layer's maps max-pooled to pool x pool
    residual: list[torch.Tensor | None] | None = None  # h^0..h^L, filled by capture's hooks
    sums: dict[str, dict[int, torch.Tensor]] = field(default_factory=lambda: {k: {} for k in HEAD_SUMS})
    maps: dict[int, torch.Tensor] = field(default_factory=dict)
    norms: dict[int, torch.Tensor] = field(default_factory=dict)
    first_value_ratio: dict[int, torch.Tensor] = field(default_factory=dict)
    thumbnails: dict[int, torch.Tensor] = field(default_factory=dict)
    masks: dict[tuple, MaskFacts] = field(default_factory=dict)
    withheld: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos), kept maps only
    output_norms: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos)
    first_key: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos): A[t, 0]
    learned: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (head, query_pos), kept maps only:
    # the mass a learned sink logit (gpt-oss) takes from each row, 0 for plain softmax
    block_call: dict | None = None  # given: the first block's args and kwargs land here and the forward stops

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

    def residual_stream(self) -> np.ndarray:
        """The captured h^0 .. h^L as one float32 array (layer + 1, token, d_model)."""
        return torch.stack([h[0] for h in self.residual]).float().cpu().numpy()


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


def output_gram(module: torch.nn.Module, n_heads: int, head_dim: int) -> torch.Tensor:
    """W_O^h' W_O^h per head as (head, head_dim, head_dim): ||v W_O^h||^2 = v G_h v'."""
    w = family_of(module.config).output_weight(module).float()
    w = w.reshape(w.shape[0], n_heads, head_dim)  # (d_model, head, head_dim)
    return torch.einsum("mhd,mhe->hde", w, w)


def projected_norms(vectors: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """||x W_O^h|| for vectors (..., head_dim) whose heads broadcast against gram (..., head_dim, head_dim)."""
    x = vectors.float()
    return (torch.matmul(x, gram) * x).sum(-1).clamp_min(0).sqrt()


def value_norms(module: torch.nn.Module, value: torch.Tensor, n_heads: int) -> torch.Tensor:
    """n[h, j] = || v_j^h W_O^h ||, as (kv_head, group, key_pos) in float32."""
    n_kv, _, head_dim = value.shape[1:]
    gram = output_gram(module, n_heads, head_dim).reshape(n_kv, n_heads // n_kv, head_dim, head_dim)
    return projected_norms(value[0].unsqueeze(1), gram)  # (kv_head, 1, key_pos, d) against (kv, group, d, d)


@dataclass(frozen=True)
class MaskFacts:
    """What the chunk loop needs from a layer's mask, derived once per mask and forward pass."""

    blocked: torch.Tensor  # (query_pos, key_pos) bool: keys a query may not read
    first_blocked: torch.Tensor  # (query_pos,) first blocked key, or key_pos count
    log_visible: torch.Tensor  # (query_pos,) ln(keys a query can see), 1 where only one

    @staticmethod
    def of(mask: torch.Tensor | None, n_queries: int, n_keys: int, device: torch.device) -> MaskFacts:
        if mask is None:
            rows = torch.arange(n_queries, device=device).unsqueeze(1) + (n_keys - n_queries)
            blocked = torch.arange(n_keys, device=device).unsqueeze(0) > rows
        elif mask.dtype == torch.bool:
            blocked = ~mask[0, 0]
        else:
            blocked = mask[0, 0] <= torch.finfo(mask.dtype).min / 2  # float masks hold 0 or the dtype's minimum
        first = torch.where(blocked.any(-1), blocked.byte().argmax(-1), n_keys)
        visible = n_keys - blocked.sum(-1, dtype=torch.float32)
        return MaskFacts(
            blocked,
            first,
            torch.where(visible > 1, visible.log(), torch.ones_like(visible)),
        )


@dataclass
class Kept:
    """What the chunk loop keeps besides the output; each tensor is filled when given."""

    maps: torch.Tensor | None = None  # (head, query_pos, key_pos)
    thumbs: torch.Tensor | None = None  # (head, rows, cols), max-pooled maps
    log_sum_exp: torch.Tensor | None = None  # (head, query_pos): ln sum_j e^{s_tj}
    learned: torch.Tensor | None = None  # (head, query_pos): the mass the learned sink logit takes
    first_key: torch.Tensor | None = None  # (head, query_pos): the weight each query gives key 0


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
    reducer = _Reducer(module, value, n_heads, facts) if reduce else None
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
        recorder.first_key[layer] = kept.first_key
        if n_keys > 1:
            norms = reducer.norms.reshape(n_heads, n_keys).double()  # (head, key_pos)
            recorder.first_value_ratio[layer] = norms[:, 0] / norms[:, 1:].quantile(0.5, dim=-1)
    if keep:
        _keep_layer(recorder, module, layer, kept, value, out)
    return out, None


def _keep_layer(
    recorder: Recorder, module: torch.nn.Module, layer: int, kept: Kept, value: torch.Tensor, out: torch.Tensor
) -> None:
    """Store one layer's maps with what the teaching views read off them, then stop if asked."""
    n_heads, head_dim = out.shape[2], out.shape[3]
    recorder.maps[layer] = kept.maps
    recorder.norms[layer] = value_norms(module, value, n_heads).reshape(n_heads, -1)  # (head, key_pos)
    recorder.withheld[layer] = torch.sigmoid(-kept.log_sum_exp)  # softmax+1 would leave 1 / (1 + sum e^s) unread
    recorder.learned[layer] = kept.learned
    per_head = out[0].transpose(0, 1)  # (head, query_pos, head_dim)
    recorder.output_norms[layer] = projected_norms(per_head, output_gram(module, n_heads, head_dim))
    if recorder.stop_after == layer:
        raise StopForward


def check_arguments(module: torch.nn.Module, dropout: float, kwargs: dict[str, object]) -> None:
    """Refuse an argument the kernel does not implement: one ignored silently would make every number wrong."""
    unknown = sorted(set(kwargs) - PLUMBING - {"is_causal"})  # is_causal=True: the mask already is causal
    unknown += ["is_causal"] * (kwargs.get("is_causal") is False) + ["dropout"] * bool(dropout)
    if unknown:
        config = getattr(module, "config", None)
        family = family_of(config).name if config is not None else type(module).__name__
        raise ModelLoadError("error.attention_argument", family=family, argument=", ".join(unknown))


def sink_share(scores: torch.Tensor, sink_logits: torch.Tensor) -> torch.Tensor:
    """The mass a learned sink logit takes from each row: softmax([s, sink])'s last column, as (..., rows).

    scores (kv_head or lane, group, rows, keys) against sink_logits (head,), heads grouped as the scores are.
    """
    sink = sink_logits.float().reshape(scores.shape[-4], scores.shape[-3], 1)  # (kv_head, group, 1)
    return torch.sigmoid(sink - torch.logsumexp(scores, dim=-1))


def attention_weights(
    scores: torch.Tensor, sink_logits: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax over the keys, less what a learned sink takes (gpt-oss: the weights of eager attention, whose rows
    sum to 1 - share); scores (..., group, rows, keys) in float32 -> (weights, share (..., group, rows) or None)."""
    weights = torch.softmax(scores, dim=-1)
    if sink_logits is None:
        return weights, None
    share = sink_share(scores, sink_logits)
    return weights.mul_((1 - share).unsqueeze(-1)), share


def eager(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
    scaling: float | None = None, softcap: float | None = None, s_aux: torch.Tensor | None = None,
) -> tuple[torch.Tensor, None]:  # fmt: skip
    """The model's own attention math, chunked, recording nothing: for functions passed to ``overriding``."""
    facts = MaskFacts.of(mask, query.shape[2], key.shape[2], query.device)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    return chunked_attention(query * scaling, key, value, facts, softcap, s_aux), None


def chunked_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    facts: MaskFacts,
    softcap: float | None,
    sink_logits: torch.Tensor | None = None,
    reducer: _Reducer | None = None,
    kept: Kept | None = None,
    edit: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """softmax(q k' + mask) v for pre-scaled queries, CHUNK_ROWS query rows at a time; with ``sink_logits``
    (head,), each row gives the learned sink its share first.

    ``edit(scores, key_positions_of_rows)`` may change the masked scores in place before the softmax.
    """
    n_heads, n_queries, n_kv, n_keys = query.shape[1], query.shape[2], key.shape[1], key.shape[2]
    group, head_dim = n_heads // n_kv, value.shape[-1]
    kept = kept or Kept()
    q = query[0].reshape(n_kv, group, n_queries, -1)  # (kv_head, group, query_pos, head_dim)
    k = key[0].transpose(1, 2)  # (kv_head, head_dim, key_pos)
    rhs = reducer.rhs if reducer is not None else value[0]  # (kv_head, key_pos, features)
    mixed = torch.empty(n_kv, group, n_queries, rhs.shape[-1], dtype=rhs.dtype, device=value.device)
    offset = n_keys - n_queries
    for q0 in range(0, n_queries, CHUNK_ROWS):
        q1 = min(q0 + CHUNK_ROWS, n_queries)
        rows, end = q1 - q0, offset + q1  # causal trimming: these rows see no key past `end`
        q_chunk = q[:, :, q0:q1].reshape(n_kv, group * rows, -1)  # (kv_head, group * rows, head_dim)
        scores = torch.bmm(q_chunk, k[:, :, :end]).view(n_kv, group, rows, end)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        scores = scores.float()
        lo = int(facts.first_blocked[q0:q1].min())  # a causal chunk masks only its last block of columns
        scores[..., lo:].masked_fill_(facts.blocked[q0:q1, lo:end], MIN_SCORE)
        if edit is not None:
            edit(scores, torch.arange(offset + q0, end, device=scores.device))
        weights, share = attention_weights(scores, sink_logits)  # (kv_head, group, rows, keys)
        flat = weights.view(n_kv, group * rows, end).to(rhs.dtype)
        mixed[:, :, q0:q1] = torch.bmm(flat, rhs[:, :end]).view(n_kv, group, rows, -1)
        if kept.log_sum_exp is not None:
            kept.log_sum_exp[:, q0:q1] = torch.logsumexp(scores, dim=-1).reshape(n_heads, rows)  # (head, rows)
        if kept.learned is not None and share is not None:
            kept.learned[:, q0:q1] = share.reshape(n_heads, rows)  # (head, rows)
        if reducer is not None:
            reducer.note(weights, scores, share, q0)
        if kept.first_key is not None:
            kept.first_key[:, q0:q1] = weights[..., 0].reshape(n_heads, rows)  # (head, rows)
        if kept.maps is not None:
            kept.maps[:, q0:q1, :end] = weights.reshape(n_heads, rows, end)  # (head, rows, keys)
        if kept.thumbs is not None:
            _max_pool_into(kept.thumbs, weights.reshape(n_heads, rows, end), q0, n_queries, n_keys)
    if reducer is not None:
        reducer.finish(mixed, kept.first_key.view(n_kv, group, n_queries))
    out = mixed[..., :head_dim].permute(2, 0, 1, 3)  # (query_pos, kv_head, group, d)
    return out.reshape(1, n_queries, n_heads, head_dim).to(value.dtype)  # (1, query_pos, head, d)


def _max_pool_into(thumbs: torch.Tensor, weights: torch.Tensor, first_row: int, n_queries: int, n_keys: int) -> None:
    """Max-pool rows ``first_row ..`` of (head, rows, keys) weights into (head, out_rows, out_cols)."""
    n_heads, rows, end = weights.shape
    out_rows, out_cols = thumbs.shape[1:]
    col_bin = torch.from_numpy(bin_index(n_keys, out_cols)[:end]).to(weights.device)  # the bins of arrays.pool_max
    row_bin = torch.from_numpy(bin_index(n_queries, out_rows)[first_row : first_row + rows]).to(weights.device)
    by_col = torch.zeros(n_heads, rows, out_cols, device=weights.device)
    by_col.scatter_reduce_(2, col_bin.expand(n_heads, rows, end), weights, "amax")  # (head, rows, out_cols)
    thumbs.scatter_reduce_(1, row_bin.view(1, -1, 1).expand(n_heads, rows, out_cols), by_col, "amax")


class _Reducer:
    """Per-head sums of the metrics in docs/metrics.md.

    The chunk loop notes six numbers per row (``note``, each named in ``NOTED``: the only passes over the weights
    besides the softmax and the matmuls); ``finish`` turns them into every metric for all rows at once, each with
    the rows it counts. The chunk's matmul is A @ [V | n], so sum_j A[t,j] n_j comes with the head output.
    """

    def __init__(self, module: torch.nn.Module, value: torch.Tensor, n_heads: int, facts: MaskFacts) -> None:
        n_kv, n_keys, head_dim = value.shape[1:]
        group, n_queries = n_heads // n_kv, facts.blocked.shape[0]
        self.gram = output_gram(module, n_heads, head_dim).reshape(n_kv, group, head_dim, head_dim)
        self.norms = projected_norms(value[0].unsqueeze(1), self.gram)  # (kv_head, group, key_pos)
        self.head_dim, self.group = head_dim, group
        width = -(-(head_dim + group) // 8) * 8  # a multiple of 8 columns: MKL's bmm takes 72 faster than 67
        self.rhs = torch.zeros(n_kv, n_keys, width, device=value.device)  # (kv, key_pos, [V | n | 0])
        self.rhs[..., :head_dim] = value[0]
        self.rhs[..., head_dim : head_dim + group] = self.norms.transpose(1, 2)
        self.log_visible = facts.log_visible
        offset = n_keys - n_queries
        key_of_row = torch.arange(offset, n_keys, device=value.device).view(1, 1, -1, 1)  # (1, 1, query_pos, 1)
        self.diagonal_at = key_of_row.expand(n_kv, group, -1, 1)
        self.previous_at = (key_of_row - 1).clamp_min(0).expand(n_kv, group, -1, 1)
        self.noted = {name: torch.zeros(n_kv, group, n_queries, device=value.device) for name in NOTED}
        self.in_q, self.from_two = key_of_row.view(-1) >= 1, key_of_row.view(-1) >= 2  # (query_pos,) row masks
        self.sums: dict[str, torch.Tensor] = {}  # metric -> (kv, group) float64, once ``finish`` has run

    def note(self, weights: torch.Tensor, scores: torch.Tensor, share: torch.Tensor | None, q0: int) -> None:
        """Rows ``q0 ..``: their largest score and weight, sum_j a s, the weights on themselves and the
        previous token, and the learned sink's share; weights, scores: (kv, group, rows, keys)."""
        q1 = q0 + weights.shape[-2]
        rows = {name: noted[..., q0:q1] for name, noted in self.noted.items()}  # (kv, group, rows) views
        if share is not None:
            rows["learned"].copy_(share)
        torch.amax(scores, -1, out=rows["row_max_score"])
        torch.amax(weights, -1, out=rows["row_max_weight"])
        torch.sum(scores.mul_(weights), -1, out=rows["weighted_score"])
        torch.gather(weights, -1, self.diagonal_at[:, :, q0:q1], out=rows["on_self"].unsqueeze(-1))
        torch.gather(weights, -1, self.previous_at[:, :, q0:q1], out=rows["on_previous"].unsqueeze(-1))

    def finish(self, mixed: torch.Tensor, first_key: torch.Tensor) -> None:
        """Every metric per row, summed over the rows each counts: mixed is A @ rhs (kv, group, query_pos, width),
        first_key the weights on key 0 (kv, group, query_pos)."""
        noted = self.noted  # each (kv, group, query_pos)
        mass = 1 - noted["learned"]  # what the real keys share: 1 unless a learned sink took some
        # ln sum_j e^s - ln mass, from the row max: the largest weight is >= mass/T, so its log never underflows
        lse_of_weights = noted["row_max_score"] - noted["row_max_weight"].log()
        read = torch.diagonal(mixed[..., self.head_dim : self.head_dim + self.group], dim1=1, dim2=3)  # (kv, t, g)
        per_row = {  # metric -> (its value per row (kv, group, query_pos), the rows it counts (query_pos,))
            "sink": (first_key, self.in_q),
            "diagonal": (noted["on_self"], self.in_q),
            "previous_token": (noted["on_previous"], self.from_two),
            # -sum a ln a = mass (lse - ln mass) - sum a s, with no log pass over the weights
            "entropy": ((lse_of_weights * mass - noted["weighted_score"]) / self.log_visible, self.in_q),
            "value_sink": (first_key * self.norms[:, :, :1] / read.transpose(1, 2).clamp_min(1e-30), self.in_q),
            "learned_sink": (noted["learned"], self.in_q),
            "withheld": (torch.sigmoid(-(lse_of_weights + mass.log())), self.in_q),  # 1 / (1 + sum_j e^s)
            "output_norm": (projected_norms(mixed[..., : self.head_dim], self.gram), self.in_q),  # ||out W_O^h||
        }
        values = torch.stack([value for value, _ in per_row.values()])  # (metric, kv, group, query_pos)
        counted = torch.stack([rows for _, rows in per_row.values()])[:, None, None, :]  # (metric, 1, 1, query_pos)
        totals = torch.where(counted, values, 0.0).cpu().sum(-1, dtype=torch.float64)  # float64 on the host
        self.sums = dict(zip(per_row, totals, strict=True))  # metric -> (kv, group)

    def store(self, into: dict[str, dict[int, torch.Tensor]], layer: int) -> None:
        for name, total in self.sums.items():
            into[name][layer] = total.reshape(-1)  # (head,)


def eager_style_mask(*args: object, **kwargs: object) -> torch.Tensor | None:
    """SDPA's boolean mask, always materialized: the chunked path needs every sliding window."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Make ``attn_implementation="sinkscope"`` known to transformers (idempotent)."""
    AttentionInterface.register(ATTENTION_NAME, sinkscope_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_style_mask)
