"""The chunk loop: softmax(q k' + mask) v, CHUNK_ROWS query rows at a time against the keys they see, in float32.

The model's own eager math (soft-capping, a learned sink logit per head), with hooks for what a caller keeps:
a reducer's per-row notes, full maps, max-pooled thumbnails, the weight on key 0, an intervention's score edit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from sinkscope.core.arrays import bin_index
from sinkscope.core.reduce import Reducer

CHUNK_ROWS = 64
MIN_SCORE = torch.finfo(torch.float32).min  # a blocked key: its softmax weight is exactly 0


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
    return weights * (1 - share).unsqueeze(-1), share  # not in place: the softmax's backward reads its output


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
    reducer: Reducer | None = None,
    kept: Kept | None = None,
    edit: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """softmax(q k' + mask) v for pre-scaled queries, CHUNK_ROWS query rows at a time; with ``sink_logits``
    (head,), each row gives the learned sink its share first.

    query (1, head, query_pos, head_dim), key and value (1, kv_head, key_pos, head_dim) -> (1, query_pos, head,
    head_dim), the layout transformers' attention functions return.

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
    # contiguous, as transformers' eager attention returns it: some families .view() it (AFMoE)
    return out.reshape(1, n_queries, n_heads, head_dim).to(value.dtype).contiguous()  # (1, query_pos, head, d)


def _max_pool_into(thumbs: torch.Tensor, weights: torch.Tensor, first_row: int, n_queries: int, n_keys: int) -> None:
    """Max-pool rows ``first_row ..`` of (head, rows, keys) weights into (head, out_rows, out_cols)."""
    n_heads, rows, end = weights.shape
    out_rows, out_cols = thumbs.shape[1:]
    col_bin = torch.from_numpy(bin_index(n_keys, out_cols)[:end]).to(weights.device)  # the bins of arrays.pool_max
    row_bin = torch.from_numpy(bin_index(n_queries, out_rows)[first_row : first_row + rows]).to(weights.device)
    by_col = torch.zeros(n_heads, rows, out_cols, device=weights.device)
    by_col.scatter_reduce_(2, col_bin.expand(n_heads, rows, end), weights, "amax")  # (head, rows, out_cols)
    thumbs.scatter_reduce_(1, row_bin.view(1, -1, 1).expand(n_heads, rows, out_cols), by_col, "amax")
