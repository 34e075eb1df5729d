"""Plotly figure builders: data in, ``go.Figure`` out. Only pages call ``st.plotly_chart``.

Token strings are data, never markup: every label and hover text goes through ``escape``.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from backend.metrics import HEAD_METRICS

METRIC_TITLES = {
    "sink": "attention to the first token",
    "diagonal": "attention to itself",
    "previous_token": "attention to the previous token",
    "entropy": "normalized entropy",
    "value_sink": "share of output read from the first token",
}
KIND_COLORS = {"sink": "#d62728", "diagonal": "#1f77b4", "previous_token": "#2ca02c", "mixed": "#bbbbbb"}


def escape(text: str) -> str:
    """Plotly renders a subset of HTML in labels: escape it so tokens show literally."""
    return html.escape(text, quote=False)


def fig_head_map(heads: dict[str, np.ndarray], metric: str) -> go.Figure:
    """A layer x head heatmap of one per-head metric; hover shows all five and the kind."""
    values = heads[metric]
    n_layers, n_heads = values.shape
    custom = np.stack([heads[m] for m in HEAD_METRICS], axis=-1)  # (layer, head, metric): 3-D for plotly 6+
    kinds = np.vectorize(str)(heads["kind"])
    lines = [f"{m}: %{{customdata[{i}]:.3f}}" for i, m in enumerate(HEAD_METRICS)]
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=np.arange(n_heads),
            y=np.arange(n_layers),
            customdata=custom,
            text=kinds,
            zmin=0,
            zmax=1,
            colorscale="Reds" if metric in ("sink", "value_sink") else "Viridis",
            colorbar={"title": {"text": metric}},
            hovertemplate="layer %{y}, head %{x}<br>" + "<br>".join(lines) + "<br>kind: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"{metric}: {METRIC_TITLES[metric]}",
        xaxis={"title": "head", "dtick": 1},
        yaxis={"title": "layer", "autorange": "reversed"},
        height=max(320, 18 * n_layers + 120),
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig


def fig_kind_counts(kinds: np.ndarray) -> go.Figure:
    """Stacked bars: how many heads of each kind every layer has."""
    layers = np.arange(kinds.shape[0])
    fig = go.Figure()
    for kind, color in KIND_COLORS.items():
        fig.add_bar(x=layers, y=(kinds == kind).sum(1), name=kind, marker_color=color)
    fig.update_layout(
        barmode="stack",
        title="Head kinds per layer",
        xaxis={"title": "layer", "dtick": 2},
        yaxis={"title": "heads"},
        height=300,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
