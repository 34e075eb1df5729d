"""Figures of the why-sinks lessons: data in, ``go.Figure`` out (line plots use ``fig_lines``)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sinkscope.core.arrays import bin_labels, pool_max
from sinkscope.core.i18n import Text
from sinkscope.core.metrics import nan_mean
from sinkscope.core.names import KINDS
from sinkscope.plot.explore_figures import (
    BELOW,
    KIND_COLORS,
    LEGEND_BELOW,
    MARGIN,
    category_ticks,
    escape,
    fig_lines,
    heading,
)


def spent(tr: Text, total: float) -> str:
    """A row's sum and what it withholds; a row that spends more than one unit (sigmoid) withholds nothing."""
    if total > 1 + 5e-4:
        return tr("lfig.sum_over", total=tr.num(total), over=tr.num(total - 1))
    return tr("lfig.sum_withheld", total=tr.num(total), withheld=tr.num(1 - total))


def fig_softmax_variants(labels: list[str], weights: dict[str, np.ndarray], lang: str = "en") -> go.Figure:
    """One bar chart per normalization of the same scores, each titled with its row sum."""
    tr = Text(lang)
    titles = [escape(name) + "<br>" + spent(tr, float(w.sum())) for name, w in weights.items()]
    fig = make_subplots(rows=1, cols=len(weights), shared_yaxes=True, subplot_titles=titles)
    for col, (name, w) in enumerate(weights.items(), start=1):
        fig.add_bar(x=[escape(s) for s in labels], y=w, name=escape(name), row=1, col=col, showlegend=False,
                    hovertemplate=tr("lfig.bar_hover"))  # fmt: skip
    fig.update_yaxes(title_text=tr("lfig.attention_weight"), row=1, col=1, rangemode="tozero")
    fig.update_layout(height=340, margin={**MARGIN, "t": 80})
    return fig


def fig_sink_scatter(heads: dict[str, np.ndarray], lang: str = "en") -> go.Figure:
    """Every head as a point (sink, value_sink): bottom right = attends to the first token, reads nothing."""
    tr = Text(lang)
    fig = go.Figure()
    n_layers, n_heads = heads["sink"].shape
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    for kind in KINDS:
        picked = heads["kind"] == kind
        fig.add_scatter(
            x=heads["sink"][picked], y=heads["value_sink"][picked], mode="markers", name=tr.kind(kind),
            marker={"color": KIND_COLORS[kind], "size": 7, "opacity": 0.8},
            customdata=np.stack([layer[picked], head[picked]], axis=-1),
            hovertemplate=tr("lfig.scatter_hover"),
        )  # fmt: skip
    fig.add_shape(type="rect", x0=0.5, x1=1, y0=0, y1=0.5, line={"dash": "dot", "color": "#d62728"})
    fig.add_annotation(x=0.75, y=0.45, text=tr("lfig.reads_little"), showarrow=False)
    diagonal = {"dash": "dot", "color": "#999"}
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=diagonal, name=tr("lfig.reads_all"))
    fig.update_layout(
        title=heading(tr("lfig.scatter_title")),
        xaxis={"title": tr("lfig.scatter_x"), "range": [0, 1]},
        yaxis={"title": tr("lfig.scatter_y"), "range": [0, 1]},
        height=460,
        margin=MARGIN,
    )
    return fig


def fig_magnitudes(layers: dict[str, np.ndarray], lang: str = "en") -> go.Figure:
    """The three largest |h| of each residual layer against its median (log): where massive activations appear."""
    tr = Text(lang)
    depth = list(range(len(layers["top1"])))
    series = {tr.metric(name): layers[name].tolist() for name in ("top1", "top2", "top3", "median_abs")}
    return fig_lines(depth, series, tr("massive.top_title"), tr("massive.layer_axis"), "|h| (log)", log_y=True)


def fig_channel_map(hidden: np.ndarray, tokens: list[str], max_rows: int = 128, lang: str = "en") -> go.Figure:
    """|h| of one layer as token x channel, log colour; tokens max-pooled when there are many."""
    tr = Text(lang)
    magnitude = np.abs(np.asarray(hidden, dtype=np.float64))
    pooled, row_starts, _ = pool_max(magnitude, max_rows, magnitude.shape[1])  # (row bin, channel): all kept
    labels = [f"{i}:{token}" for i, token in enumerate(tokens)]
    rows = [escape(label) for label in bin_labels(row_starts, magnitude.shape[0], labels)]
    fig = go.Figure(
        go.Heatmap(
            z=np.log10(np.maximum(pooled, 1e-6)).astype(np.float32), y=rows, colorscale="Magma",
            colorbar={"title": {"text": "log10 |h|"}},
            hovertemplate=tr("lfig.channel_hover"),
        )
    )  # fmt: skip
    note = tr("lfig.pooled_rows", rows=len(rows)) if len(rows) < magnitude.shape[0] else ""
    fig.update_layout(
        title=heading(tr("lfig.channel_title"), note),
        xaxis={"title": tr("lfig.channel")},
        yaxis={"title": tr("lfig.token"), "type": "category", "autorange": "reversed", **category_ticks(rows, 24)},
        height=480,
        margin={**MARGIN, "l": 110},
    )
    return fig


def fig_kind_output(kinds: np.ndarray, output_norm: np.ndarray, lang: str = "en") -> go.Figure:
    """Mean ||head output|| per kind of head: sinks write almost nothing, diagonals write their own value."""
    tr = Text(lang)
    present = [kind for kind in KINDS if (kinds == kind).any()]
    means = [float(nan_mean(output_norm[kinds == kind])) for kind in present]
    counts = [int((kinds == kind).sum()) for kind in present]
    fig = go.Figure(
        go.Bar(
            x=[tr.kind(k) for k in present], y=means, customdata=counts,
            marker_color=[KIND_COLORS[k] for k in present], hovertemplate=tr("lfig.kind_hover"),
        )
    )  # fmt: skip
    fig.update_layout(
        title=heading(tr("lfig.kind_title")),
        yaxis={"title": tr("lfig.output_norm")},
        height=360,
        margin=MARGIN,
    )
    return fig


def fig_smoothing_depth(layers: dict[str, np.ndarray], entropy: np.ndarray, lang: str = "en") -> go.Figure:
    """Token cosines, the first token's cosine and attention entropy on one depth axis (h^0 .. h^L).

    ``entropy`` is per decoder layer, drawn at the state it produces; shaded layers have bos_cosine <= 0.
    """
    tr = Text(lang)
    x = np.arange(len(layers["token_cosine"]))
    fig = go.Figure()
    names = {
        "token_cosine": tr("lfig.token_cosine"),
        "token_cosine_scaled": tr("lfig.token_cosine_scaled"),
        "bos_cosine": tr("lfig.bos_cosine"),
        "bos_cosine_raw": tr("lfig.bos_cosine_raw"),
    }
    for name, label in names.items():
        fig.add_scatter(x=x, y=layers[name], name=label, mode="lines+markers", marker={"size": 4})
    fig.add_scatter(x=x[1:], y=entropy, name=tr("lfig.entropy"), line={"dash": "dot"})
    for layer in x[np.asarray(layers["bos_cosine"]) <= 0]:
        fig.add_vrect(x0=layer - 0.5, x1=layer + 0.5, fillcolor="#d62728", opacity=0.08, line_width=0)
    fig.update_layout(
        title=heading(tr("lfig.depth_title")),
        xaxis={"title": tr("lfig.depth_x")},
        yaxis={"title": tr("lfig.depth_y"), "range": [-1, 1]},
        legend=LEGEND_BELOW,
        height=440,
        margin=BELOW,
    )
    return fig
