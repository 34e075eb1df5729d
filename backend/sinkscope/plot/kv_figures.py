"""Figures of the KV-cache lab: which tokens each eviction policy keeps (``experiments.kv_evict``), which heads need
the whole context and what DuoAttention's policy costs (``experiments.kv_heads``)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from sinkscope.core.i18n import Text
from sinkscope.plot.explore_figures import BELOW, LEGEND_BELOW, MARGIN, category_ticks, escape, heading

TICKS = 40  # token labels on the axis at most


def fig_kept(shares: np.ndarray, policies: list[str], tokens: list[str], budget: int, lang: str = "en") -> go.Figure:
    """policy x token: the share of a policy's (layer, kv head) caches that hold each token at the last step."""
    tr = Text(lang)
    labels = [f"{j}:{escape(token)}" for j, token in enumerate(tokens)]
    fig = go.Figure(go.Heatmap(z=shares, x=labels, y=policies, zmin=0, zmax=1, colorscale="Blues",
                               colorbar={"title": {"text": tr("fig.kept_share")}},
                               hovertemplate=tr("fig.kept_hover") + "<extra></extra>"))  # fmt: skip
    fig.update_layout(
        title=heading(tr("fig.kept_title", budget=budget), width=60),
        xaxis={"title": tr("fig.key"), "type": "category", **category_ticks(labels, TICKS)},
        yaxis={"autorange": "reversed"},
        height=160 + 40 * len(policies),
        margin=MARGIN,
    )
    return fig


DOT = {"symbol": "circle", "size": 7, "color": "black"}
RING = {"symbol": "circle-open", "size": 8, "color": "black"}
CROSS = {"symbol": "x-thin", "size": 5, "line": {"width": 1, "color": "rgba(0,0,0,0.45)"}}


def fig_head_effects(change: np.ndarray, title: str, marks: list[tuple[str, np.ndarray | None, dict]],
                     lang: str = "en") -> go.Figure:  # fmt: skip
    """layer x head: each head's loss change when it alone is restricted, with a marker per (name, (layer, head)
    bool, marker) mark; blank where a stopped run did not reach."""
    tr = Text(lang)
    n_layers, n_heads = change.shape
    reach = float(np.nanmax(np.abs(change))) if np.isfinite(change).any() else 1.0  # nothing measured: any scale
    fig = go.Figure(go.Heatmap(z=change, x=np.arange(n_heads), y=np.arange(n_layers), zmid=0, zmin=-reach,
                               zmax=reach, colorscale="RdBu_r", colorbar={"title": {"text": tr("fig.needs_scale")}},
                               hovertemplate=tr("fig.needs_hover") + "<extra></extra>"))  # fmt: skip
    for name, where, marker in marks:
        if where is not None and where.any():
            layer, head = np.nonzero(where)
            fig.add_scatter(x=head, y=layer, mode="markers", marker=marker, name=name, hoverinfo="skip")
    fig.update_layout(
        title=heading(title),
        xaxis={"title": tr("fig.head"), "dtick": 1, "range": [-0.5, n_heads - 0.5]},
        yaxis={"title": tr("fig.layer"), "range": [n_layers - 0.5, -0.5]},  # fixed: markers would pad it
        legend=LEGEND_BELOW,
        showlegend=True,  # the markers' entries
        height=max(320, 18 * n_layers + 140),
        margin=BELOW,
    )
    return fig


def fig_head_needs(
    change: np.ndarray, needs: np.ndarray, noise: np.ndarray, budget: int, lang: str = "en",
    estimated: np.ndarray | None = None,
) -> go.Figure:  # fmt: skip
    """Each head's loss change when it alone keeps sinks + window; a dot on those that ``needs`` the whole context, a
    ring on those within the noise of the threshold, a small cross on those ``estimated`` to first order."""
    tr = Text(lang)
    marks = [(tr("fig.needs_marked"), needs, DOT), (tr("fig.needs_noise"), noise, RING),
             (tr("fig.needs_estimated"), estimated, CROSS)]  # fmt: skip
    return fig_head_effects(change, tr("fig.needs_title", budget=budget), marks, lang)


def fig_sink_heads(change: np.ndarray, estimated: np.ndarray, lang: str = "en") -> go.Figure:
    """Each head's loss change when it alone loses its first key; a small cross on the estimated cells."""
    tr = Text(lang)
    return fig_head_effects(change, tr("fig.sink_heads_title"), [(tr("fig.needs_estimated"), estimated, CROSS)], lang)


def fig_policy_curve(curves: dict[str, tuple[list[float], list[float]]], dense: float, lang: str = "en") -> go.Figure:
    """Perplexity against the cache kept (share of the full cache), one line per way of choosing the whole heads
    ({name: (cache shares, perplexities)}), beside the dense cache."""
    tr = Text(lang)
    fig = go.Figure()
    for name, (cache, ppl) in curves.items():
        fig.add_scatter(x=[100 * share for share in cache], y=ppl, name=name, mode="lines+markers")
    fig.add_hline(y=dense, line_dash="dot", annotation_text=tr("kv.dense"), annotation_position="bottom right")
    fig.update_layout(
        title=heading(tr("fig.curve_title")),
        xaxis={"title": tr("fig.cache_kept"), "ticksuffix": "%"},
        yaxis={"title": tr("fig.perplexity")},
        legend=LEGEND_BELOW,
        height=380,
        margin=BELOW,
    )
    return fig
