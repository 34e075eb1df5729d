"""Figures of the why-sinks lessons: data in, ``go.Figure`` out (line plots use ``figures.fig_lines``)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from backend.figures import KIND_COLORS, MARGIN, escape
from backend.i18n import kind_label, num, t
from backend.metrics import KINDS, nan_mean


def fig_softmax_variants(labels: list[str], weights: dict[str, np.ndarray]) -> go.Figure:
    """One bar chart per normalization of the same scores, each titled with its row sum."""
    titles = [escape(name) + "<br>" + t("lfig.sum_withheld", total=num(w.sum()), withheld=num(1 - w.sum()))
              for name, w in weights.items()]  # fmt: skip
    fig = make_subplots(rows=1, cols=len(weights), shared_yaxes=True, subplot_titles=titles)
    for col, (name, w) in enumerate(weights.items(), start=1):
        fig.add_bar(x=[escape(s) for s in labels], y=w, name=escape(name), row=1, col=col, showlegend=False,
                    hovertemplate=t("lfig.bar_hover"))  # fmt: skip
    fig.update_yaxes(title_text=t("lfig.attention_weight"), row=1, col=1, rangemode="tozero")
    fig.update_layout(height=340, margin={**MARGIN, "t": 80})
    return fig


def fig_sink_scatter(heads: dict[str, np.ndarray]) -> go.Figure:
    """Every head as a point (sink, value_sink): bottom right = attends to the first token, reads nothing."""
    fig = go.Figure()
    n_layers, n_heads = heads["sink"].shape
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    for kind in KINDS:
        picked = heads["kind"] == kind
        fig.add_scatter(
            x=heads["sink"][picked], y=heads["value_sink"][picked], mode="markers", name=kind_label(kind),
            marker={"color": KIND_COLORS[kind], "size": 7, "opacity": 0.8},
            customdata=np.stack([layer[picked], head[picked]], axis=-1),
            hovertemplate=t("lfig.scatter_hover"),
        )  # fmt: skip
    fig.add_shape(type="rect", x0=0.5, x1=1, y0=0, y1=0.5, line={"dash": "dot", "color": "#d62728"})
    fig.add_annotation(x=0.75, y=0.45, text=t("lfig.reads_little"), showarrow=False)
    diagonal = {"dash": "dot", "color": "#999"}
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=diagonal, name=t("lfig.reads_all"))
    fig.update_layout(
        title=t("lfig.scatter_title"),
        xaxis={"title": t("lfig.scatter_x"), "range": [0, 1]},
        yaxis={"title": t("lfig.scatter_y"), "range": [0, 1]},
        height=460,
        margin=MARGIN,
    )
    return fig


def fig_channel_map(hidden: np.ndarray, tokens: list[str], max_rows: int = 128) -> go.Figure:
    """|h| of one layer as token x channel, log colour; tokens max-pooled when there are many."""
    magnitude = np.abs(np.asarray(hidden, dtype=np.float64))
    n_rows = min(len(magnitude), max_rows)
    row_starts = np.unique((np.arange(n_rows) * len(magnitude)) // n_rows)
    pooled = np.maximum.reduceat(magnitude, row_starts, axis=0)  # (row bin, channel): every channel kept
    ends = np.append(row_starts[1:], magnitude.shape[0]) - 1
    rows = [escape(f"{s}:{tokens[s]}") if s == e else f"{s}–{e}" for s, e in zip(row_starts, ends, strict=True)]
    fig = go.Figure(
        go.Heatmap(
            z=np.log10(np.maximum(pooled, 1e-6)).astype(np.float32), y=rows, colorscale="Magma",
            colorbar={"title": {"text": "log10 |h|"}},
            hovertemplate=t("lfig.channel_hover"),
        )
    )  # fmt: skip
    note = t("lfig.pooled_rows", rows=len(rows)) if len(rows) < magnitude.shape[0] else ""
    fig.update_layout(
        title=t("lfig.channel_title") + note,
        xaxis={"title": t("lfig.channel")},
        yaxis={"title": t("lfig.token"), "type": "category", "autorange": "reversed", "nticks": 30},
        height=480,
        margin={**MARGIN, "l": 110},
    )
    return fig


def fig_kind_output(kinds: np.ndarray, output_norm: np.ndarray) -> go.Figure:
    """Mean ||head output|| per kind of head: sinks write almost nothing, diagonals write their own value."""
    present = [kind for kind in KINDS if (kinds == kind).any()]
    means = [float(nan_mean(output_norm[kinds == kind])) for kind in present]
    counts = [int((kinds == kind).sum()) for kind in present]
    fig = go.Figure(
        go.Bar(
            x=[kind_label(k) for k in present], y=means, customdata=counts,
            marker_color=[KIND_COLORS[k] for k in present], hovertemplate=t("lfig.kind_hover"),
        )
    )  # fmt: skip
    fig.update_layout(
        title=t("lfig.kind_title"),
        yaxis={"title": t("lfig.output_norm")},
        height=360,
        margin=MARGIN,
    )
    return fig


def fig_smoothing_depth(layers: dict[str, np.ndarray], entropy: np.ndarray) -> go.Figure:
    """Token cosines, the first token's cosine and attention entropy on one depth axis (h^0 .. h^L).

    ``entropy`` is per decoder layer, drawn at the state it produces; shaded layers have bos_cosine <= 0.
    """
    x = np.arange(len(layers["token_cosine"]))
    fig = go.Figure()
    names = {
        "token_cosine": t("lfig.token_cosine"),
        "token_cosine_std": t("lfig.token_cosine_std"),
        "bos_cosine": t("lfig.bos_cosine"),
    }
    for name, label in names.items():
        fig.add_scatter(x=x, y=layers[name], name=label, mode="lines+markers", marker={"size": 4})
    fig.add_scatter(x=x[1:], y=entropy, name=t("lfig.entropy"), line={"dash": "dot"})
    for layer in x[np.asarray(layers["bos_cosine"]) <= 0]:
        fig.add_vrect(x0=layer - 0.5, x1=layer + 0.5, fillcolor="#d62728", opacity=0.08, line_width=0)
    fig.update_layout(
        title=t("lfig.depth_title"),
        xaxis={"title": t("lfig.depth_x")},
        yaxis={"title": t("lfig.depth_y"), "range": [-1, 1]},
        legend={"orientation": "h", "y": -0.25},
        height=440,
        margin=MARGIN,
    )
    return fig
