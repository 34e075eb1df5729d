"""Figures of the census and compare pages: tables and arrays in, ``go.Figure`` out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sinkscope.census.stats import LEVEL, WHISKERS
from sinkscope.core.i18n import Text
from sinkscope.core.names import TITLES
from sinkscope.plot.explore_figures import BELOW, KIND_COLORS, LEGEND_BELOW, MARGIN, escape, heading

PALETTE = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def fig_census_rate(rates: pd.DataFrame, eps: float, lang: str = "en") -> go.Figure:
    """Sink rate against window length, one line per model, with the documents' 95% bootstrap interval."""
    tr = Text(lang)
    fig = go.Figure()
    for (model, rows), color in zip(rates.groupby("model", sort=True), PALETTE, strict=False):
        error = {"type": "data", "symmetric": False, "array": rows["high"] - rows["rate"],
                 "arrayminus": rows["rate"] - rows["low"]}  # fmt: skip
        fig.add_scatter(x=rows["length"], y=rows["rate"], error_y=error, name=escape(model), mode="lines+markers",
                        line={"color": color}, customdata=rows["docs"],
                        hovertemplate=tr("fig.census_rate_hover"))  # fmt: skip
    fig.update_layout(
        title=heading(tr("fig.census_rate_title", eps=eps), tr("fig.census_rate_subtitle", level=round(100 * LEVEL))),
        xaxis={"title": tr("fig.window_length"), "type": "log", "tickvals": sorted(rates["length"].unique())},
        yaxis={"title": tr("fig.sink_rate_percent"), "range": [0, 100]},
        legend=LEGEND_BELOW,
        height=420,
        margin=BELOW,
    )
    return fig


def fig_census_layers(by_layer: pd.DataFrame, lang: str = "en") -> go.Figure:
    """Mean sink score per layer, one line per model and length."""
    tr = Text(lang)
    fig = go.Figure()
    for (model, length), rows in by_layer.groupby(["model", "length"], sort=True):
        name = escape(f"{model}, T={length}")
        fig.add_scatter(x=rows["layer"], y=rows["sink"], name=name, mode="lines+markers")
    return _sink_per_layer(fig, tr, tr("fig.census_layers_title"))


def fig_census_spread(spread: pd.DataFrame, title: str, lang: str = "en") -> go.Figure:
    """Per layer, the spread of per-head sink scores over every window: boxes from precomputed quantiles."""
    tr = Text(lang)
    fig = go.Figure(
        go.Box(
            x=spread["layer"], q1=spread["q1"], median=spread["median"], q3=spread["q3"],
            lowerfence=spread["p5"], upperfence=spread["p95"], marker_color=PALETTE[0], name=tr("metric.sink"),
        )
    )  # fmt: skip
    return _sink_per_layer(
        fig, tr, title, tr("fig.census_spread_subtitle", low=WHISKERS[0], high=WHISKERS[1]), legend=False
    )


def _sink_per_layer(fig: go.Figure, tr: Text, title: str, subtitle: str = "", legend: bool = True) -> go.Figure:
    """The layout both per-layer sink figures share: layers across, the sink score (0 to 1) up."""
    fig.update_layout(
        title=heading(title, subtitle),
        xaxis={"title": tr("fig.layer")},
        yaxis={"title": tr(TITLES["sink"]), "range": [0, 1]},
        showlegend=legend,
        legend=LEGEND_BELOW,
        height=420 if legend else 380,
        margin=BELOW if legend else MARGIN,
    )
    return fig


def fig_census_kinds(shares: pd.DataFrame, title: str, lang: str = "en") -> go.Figure:
    """Stacked shares of each head kind per layer, over every window."""
    tr = Text(lang)
    fig = go.Figure()
    for kind, color in KIND_COLORS.items():
        fig.add_bar(x=shares.index, y=100 * shares[str(kind)], name=tr.kind(kind), marker_color=color)
    fig.update_layout(
        barmode="stack",
        title=heading(title),
        xaxis={"title": tr("fig.layer")},
        yaxis={"title": tr("fig.heads_percent"), "range": [0, 100]},
        legend=LEGEND_BELOW,
        height=400,
        margin=BELOW,
    )
    return fig


def fig_diff_map(a: np.ndarray, b: np.ndarray, metric: str, lang: str = "en") -> go.Figure:
    """B - A of one per-head metric on a diverging scale centred on 0: red where B is higher."""
    tr = Text(lang)
    diff = b - a  # (layer, head)
    reach = max(float(np.nanmax(np.abs(diff))), 1e-6)
    fig = go.Figure(
        go.Heatmap(
            z=diff, zmin=-reach, zmax=reach, colorscale="RdBu_r", zmid=0,
            colorbar={"title": {"text": "B − A"}, "orientation": "h", "y": -0.25, "thickness": 12},
            hovertemplate=tr("fig.diff_hover"),
        )
    )  # fmt: skip
    fig.update_layout(
        title=heading(tr("fig.diff_title", metric=tr.metric(metric))),
        xaxis={"title": tr("fig.head"), "dtick": 1},
        yaxis={"title": tr("fig.layer"), "autorange": "reversed"},
        height=max(320, 18 * a.shape[0] + 160),
        margin={**MARGIN, "b": 120},
    )
    return fig
