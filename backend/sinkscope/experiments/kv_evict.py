"""Evicting tokens from the KV cache at one budget: which tokens each policy keeps, and what that costs.

Each policy holds at most ``budget`` tokens per layer and key-value head, the new token included; every token keeps
its text position (as H2O does; the streaming page re-positions StreamingLLM's cache instead):

- ``window``: the last ``budget`` tokens;
- ``sinks_window``: the first SINKS tokens and the most recent ones (StreamingLLM's choice);
- ``h2o``: heavy hitters and recent tokens (Zhang et al. 2023): the most recent half of the budget, and of the
  older tokens those with the most attention accumulated so far (summed over the head's queries and steps);
- ``h2o_sinks``: the same, with the first SINKS tokens never evicted.

The policies run side by side as lanes of one batch, one token per step. Before a step attends, a cache over its
budget evicts one token: the oldest (window policies) or the one with the least accumulated attention (H2O).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from sinkscope.core import attention, chunked, ranges
from sinkscope.core.capabilities import Can
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message
from sinkscope.core.loss import perplexity, token_nll
from sinkscope.core.models import LoadedModel, check_ids, require_loaded
from sinkscope.experiments.streaming import one_cpu_thread

POLICIES = ("window", "sinks_window", "h2o", "h2o_sinks")
SINKS = 4  # StreamingLLM's four first tokens
RECENT_SHARE = 1 / 2  # H2O keeps the most recent half of its budget
Progress = Callable[[np.ndarray, int], bool]  # ((lane, token) NLL so far, total) -> keep going?


@dataclass
class Evictor:
    """Each lane's cache per layer: keys, values, which slots it keeps, and the attention each slot accumulated."""

    policies: tuple[str, ...]
    budget: int
    n_tokens: int
    keys: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (lane, kv_head, token, head_dim)
    values: dict[int, torch.Tensor] = field(default_factory=dict)
    kept: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (lane, kv_head, token) bool
    heat: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (lane, kv_head, token): attention so far
    evicted: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # layer -> per step (lane, kv_head), -1: none
    step: int = 0

    def __post_init__(self) -> None:
        lanes = len(self.policies)
        self.protected = torch.tensor(
            [SINKS if p.endswith("sinks") or p == "sinks_window" else 0 for p in self.policies]
        )[:, None, None]  # fmt: skip  (lane, 1, 1)
        self.by_heat = torch.tensor([p.startswith("h2o") for p in self.policies])[:, None, None]  # (lane, 1, 1)
        self.recent = max(1, int(self.budget * RECENT_SHARE))
        self.lanes = lanes

    def _store(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Write the step's (lane, kv_head, 1, head_dim) key and value into its slot, kept."""
        if layer not in self.keys:
            lanes, n_kv, _, head_dim = key.shape
            self.keys[layer] = key.new_zeros(lanes, n_kv, self.n_tokens, head_dim)
            self.values[layer] = value.new_zeros(lanes, n_kv, self.n_tokens, value.shape[-1])
            self.kept[layer] = torch.zeros(lanes, n_kv, self.n_tokens, dtype=torch.bool, device=key.device)
            self.heat[layer] = torch.zeros(lanes, n_kv, self.n_tokens, device=key.device)
            self.evicted[layer] = []
        t = self.step
        self.keys[layer][:, :, t] = key[:, :, 0]
        self.values[layer][:, :, t] = value[:, :, 0]
        self.kept[layer][:, :, t] = True

    def _evict(self, layer: int) -> None:
        """Over budget: each lane and head drops one slot, the oldest or the coldest among those it may drop."""
        t = self.step
        kept = self.kept[layer][..., : t + 1]  # (lane, kv_head, slot)
        over = kept.sum(-1) > self.budget  # (lane, kv_head)
        slots = torch.arange(t + 1, device=kept.device)
        older = slots <= t - self.recent  # H2O never evicts its recent part
        may = kept & (slots >= self.protected.to(kept.device)) & (older | ~self.by_heat.to(kept.device))
        cost = torch.where(self.by_heat.to(kept.device), self.heat[layer][..., : t + 1], slots.float())
        chosen = torch.where(may, cost, torch.inf).argmin(-1)  # (lane, kv_head)
        chosen = torch.where(over & may.any(-1), chosen, -1)
        lane, head = torch.nonzero(chosen >= 0, as_tuple=True)
        self.kept[layer][lane, head, chosen[lane, head]] = False
        self.evicted[layer].append(chosen.cpu())

    def attend(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask: object, scaling: float | None = None, softcap: float | None = None,
               s_aux: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:  # fmt: skip
        """One token per lane (query (lane, head, 1, head_dim)) against what its cache keeps."""
        layer, t = module.layer_idx, self.step
        self._store(layer, key, value)
        self._evict(layer)
        lanes, n_heads, _, head_dim = query.shape
        keys, values = self.keys[layer][:, :, : t + 1], self.values[layer][:, :, : t + 1]  # (lane, kv, slot, d)
        n_kv = keys.shape[1]
        query = query * (head_dim**-0.5 if scaling is None else scaling)
        grouped = query.reshape(lanes, n_kv, n_heads // n_kv, head_dim)  # (lane, kv_head, group, head_dim)
        scores = grouped @ keys.transpose(2, 3)  # (lane, kv_head, group, slot)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        scores = scores.float().masked_fill(~self.kept[layer][:, :, None, : t + 1], chunked.MIN_SCORE)
        weights, _ = chunked.attention_weights(scores.unsqueeze(-2), s_aux)  # (lane, kv, group, 1, slot)
        weights = weights[..., 0, :]  # (lane, kv_head, group, slot)
        self.heat[layer][..., : t + 1] += weights.sum(2)  # H2O's score: attention summed over the head's queries
        mixed = weights.to(values.dtype) @ values  # (lane, kv_head, group, head_dim)
        return mixed.reshape(lanes, n_heads, 1, head_dim).transpose(1, 2), None  # (lane, 1, head, head_dim)


@dataclass(frozen=True)
class Eviction:
    """What each policy did to one text: its per-token NLL and which tokens it kept."""

    policies: tuple[str, ...]
    budget: int
    nll: np.ndarray  # (lane, token - 1)
    kept: np.ndarray  # (lane, layer, kv_head, token) bool: each cache at the last step
    evicted: np.ndarray  # (step, lane, layer, kv_head): the token each cache dropped before the step attended; -1: none
    first_kept: np.ndarray  # (lane,): share of (step, layer, kv head) caches, once full, that keep the first token

    def perplexity(self, lane: int) -> float:
        return perplexity(self.nll[lane])

    def kept_share(self) -> np.ndarray:
        """(lane, token): the share of (layer, kv head) caches that keep each token at the last step."""
        return self.kept.mean(axis=(1, 2))


def cache_refusal(n_tokens: int, budget: int) -> Message | None:
    """Why a cache of ``budget`` tokens cannot be measured on a text of ``n_tokens``, or None. It must keep more
    than its SINKS sinks, and the text must outgrow it: a cache that holds every token the last prediction reads
    evicts (and restricts) nothing, and every policy would report the dense cache."""
    if budget <= SINKS:
        return Message.of("error.evict_budget", budget=budget, sinks=SINKS)
    if n_tokens - 1 <= budget:
        return Message.of("error.cache_never_fills", budget=budget, n=n_tokens, least=budget + 2)
    return None


def check_cache(n_tokens: int, budget: int) -> None:
    """An InputError saying why, when a cache of ``budget`` cannot be measured on ``n_tokens`` tokens."""
    ranges.check("budget", budget)
    refusal = cache_refusal(n_tokens, budget)
    if refusal is not None:
        raise InputError(refusal.key, **dict(refusal.params))


def evict(
    loaded: LoadedModel, ids: list[int], budget: int, policies: tuple[str, ...] = POLICIES,
    progress: Progress | None = None,
) -> Eviction:  # fmt: skip
    """Every policy at one ``budget``, side by side, token by token over ``ids``."""
    check_ids(require_loaded(loaded), ids)
    loaded.check_length(len(ids))  # the one token limit a text meets, before any work
    loaded.require(Can.EVICT_KV)
    check_cache(len(ids), budget)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise InputError("error.unknown_choice", name="policy", value=repr(unknown), choices=", ".join(POLICIES))
    cache = Evictor(tuple(policies), budget, len(ids))
    model, nll, first = loaded.model, [], []
    targets = torch.tensor(ids[1:])
    with attention.overriding(cache.attend), torch.inference_mode(), one_cpu_thread(model.device):
        for t in range(len(ids) - 1):
            cache.step = t
            inputs = torch.full((len(policies), 1), ids[t], device=model.device)  # (lane, 1)
            logits = model(input_ids=inputs, position_ids=torch.full_like(inputs, t), use_cache=False).logits[:, -1]
            nll.append(token_nll(logits, targets[t].repeat(len(policies))))
            if t >= budget:  # full: does each cache still hold the first token?
                first.append(torch.stack([kept[:, :, 0] for kept in cache.kept.values()], 1).float().mean((1, 2)))
            if progress is not None and not progress(np.stack(nll, axis=1), len(ids) - 1):
                break
    layers = sorted(cache.kept)
    kept = torch.stack([cache.kept[layer] for layer in layers], 1)  # (lane, layer, kv_head, token)
    evicted = torch.stack([torch.stack(cache.evicted[layer]) for layer in layers], 2)  # (step, lane, layer, kv_head)
    shares = torch.stack(first).mean(0).numpy() if first else np.full(len(policies), np.nan)
    return Eviction(tuple(policies), budget, np.stack(nll, axis=1) if nll else np.zeros((len(policies), 0)),
                    kept.cpu().numpy(), evicted.numpy(), shares)  # fmt: skip


def said(found: Eviction) -> Message | None:
    """How often H2O keeps the first token on its own, and what the window without it costs against the sinks."""
    lanes = {policy: lane for lane, policy in enumerate(found.policies)}
    if not {"h2o", "window", "sinks_window"} <= set(lanes) or not found.nll.shape[1]:
        return None
    return Message.of("kv.evict_said", share=round(100 * float(found.first_kept[lanes["h2o"]]), 1),
                      budget=found.budget, window=round(found.perplexity(lanes["window"]), 1),
                      sinks=round(found.perplexity(lanes["sinks_window"]), 1),
                      h2o=round(found.perplexity(lanes["h2o"]), 1), n=SINKS)  # fmt: skip
