"""Why a head looks at the first token (docs/metrics.md, QK attribution): its score on key 0, split into one term per
residual component at position 0 (the embedding, each earlier attention and MLP write) and the bias term.

With the input norm's scale frozen at its value on this text, the first token's key is linear in the residual
stream; rotary positions leave position 0 unturned. The terms sum to the score the forward computed (``score``).

Softmax ignores a shift shared by every key, so what decides the weight on key 0 is its *margin*: the score minus the
log-sum-exp of the other keys' scores. The margin splits into the same terms plus one for the other keys (their
keys are other tokens' residuals, none of key 0's parts). ``linear_check`` sets the split's prediction for a removed
write beside a real run without it: they differ when the write also set the input norm's scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from sinkscope.core import chunked, ranges
from sinkscope.core.attention import QK
from sinkscope.core.capture import run_forward
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message, times
from sinkscope.core.models import LoadedModel, ModelInfo, require_loaded
from sinkscope.core.writes import Writes
from sinkscope.experiments.interventions import intervene
from sinkscope.experiments.writes import REMOVE_KEYS, RemoveWrite, check_writes
from sinkscope.findings.words import SPLIT_HOLDS

SUM_TOLERANCE = 1e-3  # relative: the components must add up to h^l[0] for the split to be the model's own
Part = tuple[str, int]  # ("embedding" | "attention" | "mlp" | "bias", block; -1 for the embedding and the bias)


@dataclass(frozen=True)
class QKTerms:
    """The score of one head on key 0, averaged over queries ``first .. last``, split by residual component."""

    layer: int
    head: int
    first: int
    last: int
    parts: tuple[Part, ...]
    terms: np.ndarray  # (part,): mean over the queries of scaling * <q_t, the part's share of k_0>
    score: float  # mean over the queries of the score s[t, 0] the forward computed, before any soft-capping
    others: float  # mean over the queries of ln sum_{0 < j <= t} e^{s[t, j]}; NaN when a query sees only key 0
    first_weight: float  # mean over the queries of the weight the layer gives key 0 (its mask, soft-cap, learned sink)
    scale: float  # the input norm's scale at position 0, 1 / rms(h^layer[0]), that the split holds frozen

    @property
    def margin(self) -> float:
        """What decides the weight on key 0: its score over the log-sum-exp of the other keys', averaged."""
        return self.score - self.others

    @property
    def margin_terms(self) -> np.ndarray:
        """(part + 1,): the margin split, the score's terms and then the other keys' (minus their log-sum-exp)."""
        return np.append(self.terms, -self.others)

    def term_of(self, part: Part) -> float:
        return float(self.terms[self.parts.index(part)])

    def largest(self, n: int) -> list[tuple[Part, float]]:
        """The ``n`` terms of largest magnitude, largest first."""
        order = np.argsort(-np.abs(self.terms))[:n]
        return [(self.parts[i], float(self.terms[i])) for i in order]


def _eps(norm: torch.nn.Module) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def _rms_gain(norm: torch.nn.Module) -> torch.Tensor:
    """An RMSNorm's gain (width,), read off its output for a vector of ones: what a family adds to its weight (Gemma's
    1 + weight) comes with it."""
    ones = torch.ones(norm.weight.shape[-1], dtype=norm.weight.dtype, device=norm.weight.device)
    return norm(ones).float() * math.sqrt(1 + _eps(norm))  # RMSNorm of ones: gain / sqrt(1 + eps)


def _frozen_norm(norm: torch.nn.Module, state: torch.Tensor) -> tuple[torch.Tensor, float, torch.Tensor | None]:
    """An RMSNorm or LayerNorm as gain * (x - centring) * scale (+ bias), its scale frozen at ``state`` (d_model,):
    (gain (d_model,), scale, bias or None)."""
    if isinstance(norm, torch.nn.LayerNorm):
        scale = 1 / math.sqrt(float(state.var(unbiased=False)) + _eps(norm))
        return norm.weight.float(), scale, None if norm.bias is None else norm.bias.float()
    return _rms_gain(norm), 1 / math.sqrt(float(state.pow(2).mean()) + _eps(norm)), None


def _key_parts(loaded: LoadedModel, layer: int, parts: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Each part's share of k_0 (part + 1, kv_head, head_dim), the bias term last; parts (part, d_model) sum to the
    block's input ``state`` (d_model,)."""
    norm = loaded.family.read_norms(loaded.model)[layer]
    attn = loaded.family.attention_of(loaded.blocks[layer])
    project = getattr(attn, "k_proj", None)
    if norm is None or project is None:
        raise InputError("error.qk_unavailable", family=loaded.info.family,
                         reason=Message.of("qk.post_norm" if norm is None else "qk.fused_keys"))  # fmt: skip
    gain, scale, norm_bias = _frozen_norm(norm, state)
    centred = parts - parts.mean(-1, keepdim=True) if isinstance(norm, torch.nn.LayerNorm) else parts
    weight = project.weight.float()  # (kv_head * head_dim, d_model)
    raw = (centred * gain * scale) @ weight.T  # (part, kv_head * head_dim)
    bias = project.bias.float() if project.bias is not None else torch.zeros(weight.shape[0])
    if norm_bias is not None:
        bias = bias + weight @ norm_bias
    raw = torch.cat([raw, bias[None]])  # (part + 1, kv_head * head_dim)
    head_dim = attn.head_dim
    k_norm = getattr(attn, "k_norm", None)
    if k_norm is not None:  # Qwen3, Gemma-3, OLMo-2: a norm on the keys themselves, its scale frozen the same way
        width = k_norm.weight.shape[-1]
        grouped = raw.reshape(raw.shape[0], -1, width)  # (part + 1, groups, width)
        total = grouped.sum(0)  # (groups, width): the key before its norm
        scale = (total.pow(2).mean(-1, keepdim=True) + _eps(k_norm)).rsqrt()  # (groups, 1)
        raw = (grouped * _rms_gain(k_norm) * scale).reshape(raw.shape[0], -1)
    return raw.reshape(raw.shape[0], -1, head_dim)  # (part + 1, kv_head, head_dim)


def qk_attribution(
    loaded: LoadedModel, ids: list[int] | tuple[int, ...], layer: int, head: int, queries: tuple[int, int] | None = None
) -> QKTerms:
    """Split head ``head`` of ``layer``'s score on key 0, averaged over queries ``first .. last`` (default every query
    but the first), into the embedding's, each earlier write's and the bias's share. One forward, stopped at the
    layer's attention."""
    ids = list(ids)
    n = len(ids)
    require_loaded(loaded).check_length(n)  # the one token limit a text meets, before any work
    if n < 2:
        raise InputError("error.qk_two_tokens", n=n)
    first, last = queries if queries is not None else (1, n - 1)
    if not 0 <= first <= last < n:
        raise InputError("error.query_range", first=first, last=last, end=n - 1)
    if not (ranges.is_whole(head) and 0 <= head < loaded.info.n_heads):
        raise InputError("error.head_range", head=repr(head), last=loaded.info.n_heads - 1)
    check_writes(require_loaded(loaded), layer)
    recorder = loaded.recorder(reduce=False, residual=loaded.stream_buffer(n), qk_of=layer,
                               writes=loaded.writes_buffer(n))  # fmt: skip
    run_forward(loaded, ids, recorder)
    found = recorder.qk
    query, key, scaling = found.query, found.key, found.scaling  # (1, head, q, head_dim), (1, kv_head, k, head_dim)
    parts, names = _components(recorder.writes, recorder.residual, layer, loaded.info)
    state = torch.from_numpy(recorder.residual[layer][0])
    with torch.inference_mode():
        keys = _key_parts(loaded, layer, parts, state)  # (part + 1, kv_head, head_dim)
    kv = head // (loaded.info.n_heads // loaded.info.n_kv_heads)
    q = query[0, head, first : last + 1].float()  # (queries, head_dim)
    terms = scaling * (q @ keys[:, kv].T).mean(0)  # (part + 1,)
    scores = scaling * (q @ key[0, kv, : last + 1].float().T)  # (queries, key_pos)
    seen = torch.arange(last + 1)[None, :] <= torch.arange(first, last + 1)[:, None]  # (queries, key_pos): causal
    others = torch.where(seen & (torch.arange(last + 1) > 0), scores, -torch.inf).logsumexp(-1)  # (queries,)
    weight = _first_weight(found, scores, head, first, last)
    rms = float(state.pow(2).mean().sqrt())
    return QKTerms(layer, head, first, last, (*names, ("bias", -1)), terms.numpy().astype(np.float64),
                   float(scores[:, 0].mean()), float(others.mean()) if first > 0 else float("nan"),
                   float(weight.mean()), 1 / rms if rms > 0 else float("nan"))  # fmt: skip


def _first_weight(found: QK, scores: torch.Tensor, head: int, first: int, last: int) -> torch.Tensor:
    """(queries,): the weight the layer gives key 0, by the model's own math: its mask (a sliding window), its
    soft-capping and its learned sink logit, on ``scores`` (queries, key_pos) before any of them."""
    n = found.key.shape[2]
    visible = ~chunked.MaskFacts.of(found.mask, found.query.shape[2], n, scores.device).blocked  # (query, key)
    if found.softcap is not None:
        scores = torch.tanh(scores / found.softcap) * found.softcap
    logits = torch.where(visible[first : last + 1, : last + 1], scores, -torch.inf)  # (queries, key_pos)
    weight = logits.softmax(-1)[:, 0]
    if found.sink_logits is not None:  # the learned sink takes its share of every row first
        weight = weight * (1 - torch.sigmoid(found.sink_logits[head].float() - logits.logsumexp(-1)))
    return weight


@dataclass(frozen=True)
class LinearCheck:
    """A write removed at position 0: what the frozen-norm split predicts for the head, and a real run without it."""

    removed: Part  # (part, block)
    intact: QKTerms
    ablated: QKTerms

    @property
    def predicted_score(self) -> float:
        return self.intact.score - self.intact.term_of(self.removed)

    @property
    def predicted_margin(self) -> float:
        return self.intact.margin - self.intact.term_of(self.removed)

    @property
    def holds(self) -> bool:
        """The split's prediction of the margin is within SPLIT_HOLDS of the real one."""
        return abs(self.predicted_margin - self.ablated.margin) <= SPLIT_HOLDS

    def said(self) -> Message:
        part, block = self.removed
        return Message.of("origins.linear_holds" if self.holds else "origins.linear_differs",
                          write=Message.of(REMOVE_KEYS[part], layer=block), predicted=round(self.predicted_margin, 1),
                          real=round(self.ablated.margin, 1), before=round(self.intact.margin, 1),
                          weight_before=round(self.intact.first_weight, 3),
                          weight_after=round(self.ablated.first_weight, 3),
                          scale=times(self.ablated.scale / self.intact.scale), holds=SPLIT_HOLDS)  # fmt: skip


def linear_check(
    loaded: LoadedModel, ids: list[int] | tuple[int, ...], layer: int, head: int, removed: Part,
    queries: tuple[int, int] | None = None, intact: QKTerms | None = None,
) -> LinearCheck:  # fmt: skip
    """The head's split with the text intact (``intact`` when the caller has it), and a real run without write
    ``removed`` (part, block < layer)."""
    part, block = removed
    if not 0 <= block < layer:
        raise InputError("error.write_before", block=block, layer=layer)
    intact = intact or qk_attribution(loaded, ids, layer, head, queries)
    with intervene(loaded, RemoveWrite(block, part)):
        ablated = qk_attribution(loaded, ids, layer, head, queries)
    return LinearCheck(removed, intact, ablated)


def _components(writes: Writes, residual: np.ndarray, layer: int, info: ModelInfo) -> tuple[torch.Tensor, list[Part]]:
    """h^layer[0] as its sum of parts (part, d_model): the embedding, then each block's attention and MLP write."""
    rows, names = [residual[0][0]], [("embedding", -1)]
    for block in range(layer):
        rows += [writes.first[0, block], writes.first[1, block]]
        names += [("attention", block), ("mlp", block)]
    parts = torch.from_numpy(np.stack(rows))  # (part, d_model)
    state = residual[layer][0]
    gap = float(np.linalg.norm(parts.sum(0).numpy() - state) / max(np.linalg.norm(state), 1e-30))
    if not gap <= SUM_TOLERANCE:  # a post-norm or otherwise rescaled stream is not the sum of its writes
        reason = Message.of("qk.not_a_sum") if info.dtype == "float32" else Message.of("qk.reduced_precision",
                                                                                        dtype=info.dtype)  # fmt: skip
        raise InputError("error.qk_unavailable", family=info.family, reason=reason)
    return parts, names
