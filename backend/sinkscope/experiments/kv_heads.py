"""Which heads need the whole context: each head alone restricted to sinks + a window (DuoAttention's question).

DuoAttention (Xiao et al., ICLR 2025) learns a gate per key-value head that splits them into retrieval heads (the
full cache) and streaming heads (sinks + a recent window). Here the split is measured by ablation instead: for every
head, the change of the text's mean next-token loss when that head alone reads only the first SINKS tokens and its
last ``budget - SINKS`` (every other head dense). ``head_needs`` measures every head exactly (``head_effects``:
layer l costs L - l blocks per head); ``estimate_needs`` estimates every head to first order from one forward and one
backward, and ``confirm_needs`` measures exactly the heads whose estimate cannot settle their side of the threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from sinkscope.core import attention, ranges
from sinkscope.core.capabilities import Can
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message
from sinkscope.core.loss import LEVEL, perplexity
from sinkscope.core.models import LoadedModel, check_ids, require_loaded
from sinkscope.core.texts import builtin_text
from sinkscope.experiments import head_effects
from sinkscope.experiments.kv_evict import SINKS, check_cache
from sinkscope.experiments.streaming import band_mask, dense
from sinkscope.findings.words import LITTLE_WORSE, NEEDS_CONTEXT

ESTIMATE_MARGIN = 0.025  # nats: the largest |exact - estimate| of bench/bench_heads.py (SmolLM2, 3 texts x 2 caches)
Progress = Callable[["HeadNeeds"], bool]  # the map so far (NaN where not yet measured) -> keep going?


@dataclass(frozen=True)
class HeadNeeds:
    """Per head, what restricting it alone to sinks + window costs the text's mean next-token loss."""

    budget: int  # cache size: SINKS first tokens and budget - SINKS recent ones
    dense_nll: np.ndarray  # (token - 1,)
    change: np.ndarray  # (layer, head): mean NLL ablated - dense, in nats; NaN: not measured (stopped)
    low: np.ndarray | None = None  # (layer, head): the change's LEVEL bootstrap interval over tokens, or an
    high: np.ndarray | None = None  # estimate's band (None: the change alone, as if it had no noise)
    estimated: np.ndarray | None = None  # (layer, head) bool: cells holding the first-order estimate (None: none)

    @staticmethod
    def of(budget: int, cells: head_effects.Cells) -> HeadNeeds:
        return HeadNeeds(budget, cells.dense_nll, cells.change, cells.low, cells.high, cells.estimated)

    def cells(self) -> head_effects.Cells:
        low, high = self._interval()
        return head_effects.Cells(self.dense_nll, self.change, low, high, self.estimates)

    @property
    def estimates(self) -> np.ndarray:
        """(layer, head) bool: the cells holding an estimate."""
        return np.zeros(self.change.shape, dtype=bool) if self.estimated is None else self.estimated

    def unsettled(self) -> np.ndarray:
        """(layer, head) bool: estimated cells whose band reaches the threshold: only the exact change places them."""
        return self.estimates & (self._interval()[1] > np.log1p(NEEDS_CONTEXT))

    def _interval(self) -> tuple[np.ndarray, np.ndarray]:
        found = (self.change, self.change) if self.low is None or self.high is None else (self.low, self.high)
        return tuple(np.nan_to_num(bound, nan=0.0) for bound in found)

    def needs_context(self) -> np.ndarray:
        """(layer, head) bool: the retrieval heads, whose restriction raises perplexity by over NEEDS_CONTEXT across
        the whole interval."""
        return self._interval()[0] > np.log1p(NEEDS_CONTEXT)

    def within_noise(self) -> np.ndarray:
        """(layer, head) bool: measured heads whose interval holds the threshold: this text cannot place them."""
        low, high = self._interval()
        return self.measured & (low <= np.log1p(NEEDS_CONTEXT)) & (high > np.log1p(NEEDS_CONTEXT))

    def streams(self) -> np.ndarray:
        """(layer, head) bool: measured heads that work with sinks + window across the whole interval."""
        return self.measured & ~self.needs_context() & ~self.within_noise()

    @property
    def measured(self) -> np.ndarray:
        """(layer, head) bool: the heads the run reached."""
        return ~np.isnan(self.change)

    def streaming_share(self) -> float:
        """The share of the measured heads this text places (outside the noise) that work with sinks + window (NaN:
        none placed)."""
        placed = self.measured & ~self.within_noise()
        return float(self.streams()[placed].mean()) if placed.any() else float("nan")


def require_needs(loaded: LoadedModel, value: object) -> HeadNeeds:
    """``value`` when it is a per-head map of ``loaded``'s heads; an error that says what to pass otherwise."""
    if not isinstance(value, HeadNeeds):
        raise TypeError(f"expected a per-head map, needs = sinkscope.head_needs(model, ids, budget) (or "
                        f"estimate_needs), got {ranges.shown(value)}")  # fmt: skip
    heads = (loaded.info.n_layers, loaded.info.n_heads)
    if value.change.shape != heads:  # a map of another model's heads
        raise InputError("error.needs_shape", shape=" x ".join(map(str, value.change.shape)),
                         heads=" x ".join(map(str, heads)))  # fmt: skip
    return value


def _checked(loaded: LoadedModel, ids: list[int], budget: int) -> torch.Tensor:
    """The band a restricted head reads, once the model and the text are known to allow the measurement."""
    check_ids(require_loaded(loaded), ids)
    loaded.check_length(len(ids))  # the one token limit a text meets, before any work
    loaded.require(Can.EVICT_KV)
    check_cache(len(ids), budget)
    return band_mask(len(ids), SINKS, budget - SINKS)


def _reporting(budget: int, progress: Progress | None) -> head_effects.Progress | None:
    return None if progress is None else lambda cells: progress(HeadNeeds.of(budget, cells))


def head_needs(loaded: LoadedModel, ids: list[int], budget: int, progress: Progress | None = None,
               pause: head_effects.Pause | None = None) -> HeadNeeds:  # fmt: skip
    """Every head's exact loss change when it alone keeps sinks + window (a cache of ``budget`` tokens), unit by
    unit; ``progress`` may stop the run after any unit, keeping what it measured; ``pause`` runs between blocks."""
    band = _checked(loaded, ids, budget)
    every = np.ones((loaded.info.n_layers, loaded.info.n_heads), dtype=bool)
    return HeadNeeds.of(budget, head_effects.exact(loaded, ids, band, head_effects.unmeasured(loaded), every,
                                                   _reporting(budget, progress), pause))  # fmt: skip


def estimate_needs(loaded: LoadedModel, ids: list[int], budget: int, margin: float = ESTIMATE_MARGIN) -> HeadNeeds:
    """Every head's first-order loss change when it alone keeps sinks + window, from one forward and one backward;
    each cell marked as an estimate, its band ``margin`` nats either way."""
    ranges.check("margin", margin)
    band = _checked(loaded, ids, budget)
    return HeadNeeds.of(budget, head_effects.estimate(loaded, ids, band, margin))


def confirm_needs(loaded: LoadedModel, ids: list[int], first: HeadNeeds, progress: Progress | None = None,
                  pause: head_effects.Pause | None = None) -> HeadNeeds:  # fmt: skip
    """``first`` (``estimate_needs`` on ``ids``) with the exact change of each head whose estimate's band reaches the
    NEEDS_CONTEXT threshold (the heads it ranks highest and those near the threshold), the layers holding the largest
    estimates first; a stopped run keeps what it confirmed, the rest estimated; ``pause`` runs between blocks."""
    first = require_needs(require_loaded(loaded), first)
    band = _checked(loaded, ids, first.budget)
    cells = head_effects.exact(loaded, ids, band, first.cells(), first.unsettled(), _reporting(first.budget, progress),
                               pause)  # fmt: skip
    return HeadNeeds.of(first.budget, cells)


CURVE_SHARES = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)  # shares of key-value heads kept whole along the policy curve
ORDERS = ("ranked", "random")  # whole heads chosen by the map's loss change, or at random (the baseline)


@dataclass(frozen=True)
class DuoPolicy:
    """DuoAttention's cache: retrieval key-value heads keep every token, streaming ones only sinks + window."""

    streaming: np.ndarray  # (layer, kv_head) bool
    nll: np.ndarray  # (token - 1,)
    cache_share: float  # the cache it holds at the end of the text, against the full cache
    dense_nll: np.ndarray | None = None  # (token - 1,): the dense cache on the same text (None: not run)

    @property
    def perplexity(self) -> float:
        return perplexity(self.nll)

    @property
    def dense_perplexity(self) -> float:
        return perplexity(self.dense_nll) if self.dense_nll is not None else float("nan")

    @property
    def retrieval_share(self) -> float:
        return float(1 - self.streaming.mean())


def kv_head_change(needs: HeadNeeds, n_kv_heads: int, bound: np.ndarray | None = None) -> np.ndarray:
    """(layer, kv_head): the largest loss change (or ``bound`` (layer, head), e.g. the interval's top) of the
    key-value head's query heads; +inf where not measured (the cache is per key-value head, so it can stream only
    if every query head reading it can)."""
    change = np.where(needs.measured, needs.change if bound is None else bound, np.inf)
    return change.reshape(change.shape[0], n_kv_heads, -1).max(-1)  # (layer, kv_head, group) -> (layer, kv_head)


def held_out_ids(loaded: LoadedModel, n_tokens: int) -> list[int]:
    """The ``n_tokens`` of Python's help after its first ``n_tokens``: a text to score DuoAttention's policy on that
    its per-head map was not built on (the map runs on the first ones, or on the visitor's text)."""
    ranges.check("n_tokens", n_tokens)
    return loaded.encode(builtin_text(), 2 * n_tokens, truncate=True, add_bos=False)[n_tokens:]


def whole_heads(needs: HeadNeeds, n_kv_heads: int, share: float, order: str = "ranked") -> np.ndarray:
    """(layer, kv_head) bool: the ``share`` of key-value heads kept whole, those whose restriction costs most
    ("ranked") or drawn with a fixed seed ("random")."""
    ranges.check("share", share)
    ranges.check_choice("order", order, ORDERS)
    change = kv_head_change(needs, n_kv_heads)
    score = change if order == "ranked" else np.random.default_rng(0).random(change.shape)
    chosen = np.zeros(change.size, dtype=bool)
    chosen[np.argsort(-score, axis=None, kind="stable")[: round(share * change.size)]] = True
    return chosen.reshape(change.shape)


def _per_kv_head(whole: object, n_layers: int, n_kv_heads: int) -> np.ndarray:
    """``whole`` as the (layer, kv_head) bool array it must be; an InputError naming it otherwise."""
    found = np.asarray(whole)
    if found.dtype != bool or found.shape != (n_layers, n_kv_heads):
        raise InputError("error.duo_whole", layers=n_layers, kv_heads=n_kv_heads, value=ranges.shown(whole))
    return found


def duo_policy(
    loaded: LoadedModel, ids: list[int], needs: HeadNeeds, whole: np.ndarray | None = None,
    dense_nll: np.ndarray | None = None,
) -> DuoPolicy:  # fmt: skip
    """One pass over ``ids`` where every key-value head not kept ``whole`` (layer, kv_head) keeps only sinks +
    window, beside the dense cache on the same text (``dense_nll`` when the caller has it); by default the whole
    ones are those with a query head that may need the whole context (the top of its interval over the threshold),
    or one not measured."""
    needs = require_needs(require_loaded(loaded), needs)
    band = _checked(loaded, ids, needs.budget)
    info = loaded.info
    group = info.n_heads // info.n_kv_heads
    if whole is None:
        whole = kv_head_change(needs, info.n_kv_heads, needs.high) > np.log1p(NEEDS_CONTEXT)
    streaming = ~_per_kv_head(whole, info.n_layers, info.n_kv_heads)
    restricted = torch.from_numpy(np.repeat(streaming, group, axis=1))[None]  # (lane=1, layer, head)
    with attention.overriding(head_effects.Restricted(restricted, band.to(loaded.model.device)).attend):
        nll = dense(loaded, ids)
    held = np.where(streaming, min(needs.budget, len(ids)), len(ids))  # (layer, kv_head): tokens each one holds
    dense_nll = dense(loaded, ids) if dense_nll is None else dense_nll
    return DuoPolicy(streaming, nll, float(held.sum() / (len(ids) * streaming.size)), dense_nll)


def policy_curve(
    loaded: LoadedModel, ids: list[int], needs: HeadNeeds, shares: tuple[float, ...] = CURVE_SHARES
) -> dict[str, list[DuoPolicy]]:
    """Per order: the policy keeping each share of key-value heads whole, one pass each over ``ids``."""
    needs = require_needs(require_loaded(loaded), needs)
    for share in shares:
        ranges.check("share", share)
    _checked(loaded, ids, needs.budget)  # before the dense pass
    n_kv, dense_nll = loaded.info.n_kv_heads, dense(loaded, ids)
    return {order: [duo_policy(loaded, ids, needs, whole_heads(needs, n_kv, share, order), dense_nll)
                    for share in shares] for order in ORDERS}  # fmt: skip


def said(needs: HeadNeeds, policy: DuoPolicy | None) -> Message | None:
    """How many heads work with sinks + window, and what DuoAttention's policy built from them costs (whether the
    heads' small costs add up to a perplexity LITTLE_WORSE than dense)."""
    measured = int(needs.measured.sum())
    if not measured:
        return None
    noise, share = int(needs.within_noise().sum()), needs.streaming_share()
    if np.isnan(share):  # every measured head's interval (or an estimate's band) holds the threshold
        placed = Message.of("kv.heads_none_placed", measured=measured, rise=round(100 * NEEDS_CONTEXT))
    else:
        placed = Message.of("kv.heads_placed", noise=noise, measured=measured, rise=round(100 * NEEDS_CONTEXT),
                            level=round(100 * LEVEL), placed=measured - noise, share=round(100 * share))  # fmt: skip
    params = dict(streaming=int(needs.streams().sum()), measured=measured, budget=needs.budget,
                  rise=round(100 * NEEDS_CONTEXT), dense=round(perplexity(needs.dense_nll), 2),
                  placed_said=placed)  # fmt: skip
    if policy is None:
        return Message.of("kv.heads_said", **params)
    adds_up = policy.perplexity >= LITTLE_WORSE * policy.dense_perplexity
    return Message.of("kv.heads_policy_said" if adds_up else "kv.heads_policy_little", **params,
                      policy=round(policy.perplexity, 2), cache=round(100 * policy.cache_share),
                      policy_dense=round(policy.dense_perplexity, 2), tokens=len(policy.nll) + 1)  # fmt: skip
