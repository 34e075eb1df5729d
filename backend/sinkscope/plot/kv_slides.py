"""The KV-cache lab's figures with their labels in one language: the page shows them and ``sinkscope kv --figures``
writes them for slides (the quantized caches' loss, which tokens each eviction policy keeps and what it costs, the
per-head map and DuoAttention's policy curve)."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import plotly.graph_objects as go

from sinkscope.core.i18n import Text
from sinkscope.core.names import POLICY_KEYS, PROTECT_KEYS
from sinkscope.plot.explore_figures import fig_lines, rolling_mean
from sinkscope.plot.kv_figures import fig_head_needs, fig_kept, fig_policy_curve

SMOOTHING = 8  # tokens in the rolling mean of a loss curve
ORDER_KEYS = {"ranked": "kv.order_ranked", "random": "kv.order_random"}


class KVRow(Protocol):  # what a figure reads of the experiments' results (named, not imported: no torch here)
    bits: int
    protect: str
    nll: np.ndarray


class Eviction(Protocol):
    policies: tuple[str, ...]
    budget: int
    nll: np.ndarray  # (lane, token - 1)

    def kept_share(self) -> np.ndarray: ...


class HeadNeeds(Protocol):
    budget: int
    change: np.ndarray  # (layer, head)
    dense_nll: np.ndarray

    def needs_context(self) -> np.ndarray: ...

    def within_noise(self) -> np.ndarray: ...

    @property
    def estimates(self) -> np.ndarray: ...


class DuoPolicy(Protocol):
    cache_share: float
    dense_perplexity: float

    @property
    def perplexity(self) -> float: ...


def quantized_curves(rows: list[KVRow], lang: str = "en") -> go.Figure:
    """The per-token loss at the fewest bits measured, one line per protection, beside the dense cache."""
    tr = Text(lang)
    fewest = min(row.bits for row in rows if row.bits)
    series = {tr("kv.dense"): rows[0].nll}
    series |= {tr(PROTECT_KEYS[row.protect]): row.nll for row in rows if row.bits == fewest}
    smoothed = {name: rolling_mean(nll, SMOOTHING).tolist() for name, nll in series.items()}
    positions = list(range(1, len(rows[0].nll) + 1))
    return fig_lines(positions, smoothed, tr("kv.curve_title", bits=fewest, n=SMOOTHING), tr("fig.position"),
                     tr("kv.loss"))  # fmt: skip


def eviction_figures(found: Eviction, tokens: list[str], lang: str = "en") -> dict[str, go.Figure]:
    """Which tokens each policy keeps at the last step, and each policy's per-token loss."""
    tr = Text(lang)
    labels = [tr(POLICY_KEYS[p]) for p in found.policies]
    smoothed = {label: rolling_mean(found.nll[lane], SMOOTHING).tolist() for lane, label in enumerate(labels)}
    positions = list(range(1, found.nll.shape[1] + 1))
    title = tr("kv.evict_curve_title", budget=found.budget, n=SMOOTHING)
    return {"kv_kept": fig_kept(found.kept_share(), labels, tokens, found.budget, lang=lang),
            "kv_evict_curves": fig_lines(positions, smoothed, title, tr("fig.position"), tr("kv.loss"))}  # fmt: skip


def needs_map(needs: HeadNeeds, lang: str = "en") -> go.Figure:
    """The per-head map: each head's loss change alone with sinks + window, the ones that need the whole context
    dotted, the ones within the noise of that threshold ringed, the estimated ones crossed."""
    return fig_head_needs(needs.change, needs.needs_context(), needs.within_noise(), needs.budget, lang=lang,
                          estimated=needs.estimates)  # fmt: skip


def duo_curve(curve: dict[str, list[DuoPolicy]], lang: str = "en") -> go.Figure:
    """DuoAttention's policy curve, one line per way of choosing the whole heads, beside the dense cache on the
    same text."""
    lines = {Text(lang)(ORDER_KEYS[order]): ([p.cache_share for p in policies], [p.perplexity for p in policies])
             for order, policies in curve.items()}  # fmt: skip
    dense = next(policy.dense_perplexity for policies in curve.values() for policy in policies)
    return fig_policy_curve(lines, dense, lang=lang)
