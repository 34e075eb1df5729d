"""Plotly figure builders: data in, ``go.Figure`` out. Only pages call ``st.plotly_chart``.

Token strings are data, never markup: every label and hover text goes through ``escape``.
"""

from __future__ import annotations

import base64
import html
import io

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from backend.i18n import kind_label, t
from backend.metrics import HEAD_METRICS, nan_mean
from backend.streaming import band_mask

METRIC_TITLES = {
    "sink": "metric.sink",
    "diagonal": "metric.diagonal",
    "previous_token": "metric.previous_token",
    "entropy": "metric.entropy",
    "value_sink": "metric.value_sink",
    "withheld": "metric.withheld",
}  # catalogue keys
MARGIN = {"l": 50, "r": 20, "t": 50, "b": 40}
KIND_COLORS = {"sink": "#d62728", "diagonal": "#1f77b4", "previous_token": "#2ca02c", "mixed": "#bbbbbb"}


def escape(text: str) -> str:
    """Plotly renders a subset of HTML in labels: escape it so tokens show literally."""
    return html.escape(text, quote=False)


def fig_head_map(heads: dict[str, np.ndarray], metric: str) -> go.Figure:
    """A layer x head heatmap of one per-head metric; hover shows all five and the kind."""
    values = heads[metric]
    n_layers, n_heads = values.shape
    custom = np.stack([heads[m] for m in HEAD_METRICS], axis=-1)  # (layer, head, metric): 3-D for plotly 6+
    kinds = np.vectorize(kind_label)(heads["kind"])
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
            hovertemplate=t("fig.head_hover") + "<br>" + "<br>".join(lines) + "<br>" + t("fig.kind_hover"),
        )
    )
    fig.update_layout(
        title=f"{metric}: {t(METRIC_TITLES[metric])}",
        xaxis={"title": t("fig.head"), "dtick": 1},
        yaxis={"title": t("fig.layer"), "autorange": "reversed"},
        height=max(320, 18 * n_layers + 120),
        margin=MARGIN,
    )
    return fig


def fig_kind_counts(kinds: np.ndarray) -> go.Figure:
    """Stacked bars: how many heads of each kind every layer has."""
    layers = np.arange(kinds.shape[0])
    fig = go.Figure()
    for kind, color in KIND_COLORS.items():
        fig.add_bar(x=layers, y=(kinds == kind).sum(1), name=kind_label(kind), marker_color=color)
    fig.update_layout(
        barmode="stack",
        title=t("fig.kinds_title"),
        xaxis={"title": t("fig.layer"), "dtick": 2},
        yaxis={"title": t("fig.heads")},
        height=300,
        margin=MARGIN,
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def pool_max(matrix: np.ndarray, max_cells: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Max-pool a (rows, cols) matrix to at most max_cells per side; NaN-aware.

    Returns the pooled matrix and, per axis, the first index of every bin.
    """
    rows, cols = matrix.shape
    row_starts = np.unique((np.arange(min(rows, max_cells)) * rows) // min(rows, max_cells))
    col_starts = np.unique((np.arange(min(cols, max_cells)) * cols) // min(cols, max_cells))
    filled = np.where(np.isnan(matrix), -np.inf, matrix)
    pooled = np.maximum.reduceat(np.maximum.reduceat(filled, row_starts, axis=0), col_starts, axis=1)
    return np.where(np.isinf(pooled), np.nan, pooled), row_starts, col_starts


def bin_labels(starts: np.ndarray, length: int, labels: list[str]) -> list[str]:
    """One label per bin: the token label when a bin holds one token, else ``first-last``."""
    ends = np.append(starts[1:], length) - 1
    return [labels[s] if s == e else f"{s}–{e}" for s, e in zip(starts, ends, strict=True)]


def fig_attention(
    matrix: np.ndarray,
    row_labels: list[str],
    col_labels: list[str],
    title: str,
    log_scale: bool = False,
    max_cells: int = 256,
) -> go.Figure:
    """One head's (query, key) map with token labels; pooled (max) when larger than max_cells."""
    pooled, row_starts, col_starts = pool_max(np.asarray(matrix, dtype=np.float64), max_cells)
    rows = [escape(s) for s in bin_labels(row_starts, matrix.shape[0], row_labels)]
    cols = [escape(s) for s in bin_labels(col_starts, matrix.shape[1], col_labels)]
    shown = np.where(pooled > 0, np.log10(np.where(pooled > 0, pooled, 1)), np.nan) if log_scale else pooled
    colorbar = {"title": {"text": t("fig.log_weight" if log_scale else "fig.weight")}}
    heatmap = go.Heatmap(
        z=shown.astype(np.float32),
        x=cols,
        y=rows,
        colorscale="Blues",
        zmin=-4 if log_scale else 0,
        zmax=0 if log_scale else float(np.nanmax(pooled)) if np.isfinite(pooled).any() else 1,
        colorbar=colorbar,
        hovertemplate=t("fig.map_hover", weight=t("fig.log_weight" if log_scale else "fig.weight")),
        hoverongaps=False,
    )
    fig = go.Figure(heatmap)
    pooled_note = t("fig.pooled", rows=len(rows), cols=len(cols)) if len(rows) < matrix.shape[0] else ""
    fig.update_layout(
        title=title + pooled_note,
        xaxis={"title": t("fig.key_axis"), "type": "category", "tickangle": -60, "nticks": 40},
        yaxis={"title": t("fig.query_axis"), "type": "category", "autorange": "reversed", "nticks": 40},
        height=620,
        margin={"l": 110, "r": 20, "t": 50, "b": 110},
    )
    return fig


def thumbnail_image(thumbs: np.ndarray, gap: int = 2) -> np.ndarray:
    """Tile (rows, cols, h, w) maps into one grayscale image, each tile scaled to its own maximum."""
    n_rows, n_cols, h, w = thumbs.shape
    peak = np.nanmax(thumbs, axis=(2, 3), keepdims=True)
    scaled = np.nan_to_num(thumbs / np.where(peak > 0, peak, 1))
    image = np.ones((n_rows * (h + gap) - gap, n_cols * (w + gap) - gap))
    for r in range(n_rows):
        for c in range(n_cols):
            image[r * (h + gap) : r * (h + gap) + h, c * (w + gap) : c * (w + gap) + w] = 1 - scaled[r, c]
    return (image * 255).astype(np.uint8)


def fig_thumbnails(thumbs: np.ndarray, row_name: str, title: str) -> go.Figure:
    """A grid of small maps as one compact PNG-encoded image (not one trace per head)."""
    n_rows, n_cols, h, w = thumbs.shape
    gap = 2
    image = thumbnail_image(thumbs, gap)
    fig = go.Figure(go.Image(source=png_data_url(image), hoverinfo="skip"))
    step_y, step_x = h + gap, w + gap
    fig.update_layout(
        title=title,
        xaxis={"title": t("fig.head"), "tickvals": np.arange(n_cols) * step_x + w / 2, "ticktext": list(range(n_cols))},
        yaxis={"title": row_name, "tickvals": np.arange(n_rows) * step_y + h / 2, "ticktext": list(range(n_rows))},
        height=min(2400, max(300, n_rows * 40 + 120)),
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
    )
    return fig


def png_data_url(image: np.ndarray) -> str:
    """A grayscale uint8 image as a data: URL (PNG), so the browser gets kilobytes, not arrays."""
    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def fig_depth_profile(heads: dict[str, np.ndarray], first_norm_ratio: np.ndarray) -> go.Figure:
    """Per decoder layer: mean attention to the first token, and the first token's norm ratios (log axis)."""
    n_layers = heads["sink"].shape[0]
    layers = np.arange(n_layers)
    fig = go.Figure()
    fig.add_scatter(x=layers, y=nan_mean(heads["sink"], 1), name=t("fig.depth_sink"), yaxis="y")
    fig.add_scatter(
        x=layers,
        y=first_norm_ratio[:n_layers],  # h^l: the residual stream entering decoder layer l
        name=t("fig.depth_norm"),
        yaxis="y2",
    )
    fig.add_scatter(
        x=layers,
        y=nan_mean(heads["value_norm_ratio"], 1),
        name=t("fig.depth_value"),
        yaxis="y2",
        line={"dash": "dot"},
    )
    fig.update_layout(
        title=t("fig.depth_title"),
        xaxis={"title": t("fig.decoder_layer"), "dtick": 2},
        yaxis={"title": t("fig.attention"), "range": [0, 1]},
        yaxis2={"title": t("fig.ratio_log"), "type": "log", "dtick": 1, "overlaying": "y", "side": "right"},
        legend={"orientation": "h", "y": -0.25},
        height=420,
        margin={"l": 50, "r": 50, "t": 50, "b": 40},
    )
    return fig


def figure_html(fig: go.Figure) -> str:
    """A standalone page (plotly.js inlined) that opens offline."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


def rolling_mean(values: np.ndarray, width: int) -> np.ndarray:
    """Trailing mean over up to ``width`` values (shorter at the start)."""
    sums = np.cumsum(np.insert(np.asarray(values, dtype=np.float64), 0, 0.0))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(0, ends - width)
    return (sums[ends] - sums[starts]) / (ends - starts)


def fig_stream_nll(curves: dict[str, np.ndarray], labels: dict[str, str], cache_size: int, width: int) -> go.Figure:
    """Per-token NLL (rolling mean) against position, one line per method; a line where the cache fills."""
    fig = go.Figure()
    for method, nll in curves.items():
        fig.add_scatter(x=np.arange(1, len(nll) + 1), y=rolling_mean(nll, width), name=labels.get(method, method))
    fig.add_vline(x=cache_size, line_dash="dash", annotation_text=t("fig.cache_full"))
    fig.update_layout(
        title=t("fig.stream_title", width=width),
        xaxis={"title": t("fig.position")},
        yaxis={"title": t("fig.nll")},
        legend={"orientation": "h", "y": -0.25},
        height=440,
        margin=MARGIN,
    )
    return fig


def fig_ppl_vs_sinks(sinks: list[int], ppl: list[float], cache_size: int, engine: str) -> go.Figure:
    """Perplexity against the number of sink tokens at one fixed cache size (Xiao et al., Table 2)."""
    fig = go.Figure(go.Bar(x=[str(s) for s in sinks], y=ppl, text=[f"{p:.2f}" for p in ppl], textposition="outside"))
    fig.update_layout(
        title=t("fig.sweep_title", cache=cache_size, engine=engine),
        xaxis={"title": t("fig.sink_tokens")},
        yaxis={"title": t("fig.perplexity"), "type": "log"},
        height=380,
        margin=MARGIN,
    )
    return fig


def fig_cache_membership(n_tokens: int, sinks: int, window: int, step: int, max_cells: int = 256) -> go.Figure:
    """Which keys the cache holds at each step (rows): sinks, the recent window, and the chosen step."""
    held = band_mask(n_tokens, sinks, window)[0, 0].numpy()  # (step, key): the same band the cache keeps
    shade = held.astype(np.float32) + (np.arange(n_tokens) < sinks) * held * 0.5  # sinks darker than the window
    shade[step] += 0.6 * (shade[step] > 0)
    pooled, row_starts, col_starts = pool_max(shade, max_cells)
    fig = go.Figure(
        go.Heatmap(
            z=pooled,
            x=col_starts,
            y=row_starts,
            colorscale="Greys",
            showscale=False,
            hovertemplate=t("fig.cache_hover"),
        )
    )
    note = t("fig.cache_step", step=step, keys=min(step + 1, sinks + window))
    fig.add_hline(y=step, line_color="#d62728", annotation_text=note)
    fig.update_layout(
        title=t("fig.cache_title", sinks=sinks, window=window),
        xaxis={"title": t("fig.key_position")},
        yaxis={"title": t("fig.step_axis"), "autorange": "reversed"},
        height=420,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
    )
    return fig


def fig_lines(
    x: dict[str, list[float]] | list[float] | list[str], series: dict[str, list[float]], title: str, x_title: str,
    y_title: str, log_x: bool = False, log_y: bool = False,
) -> go.Figure:  # fmt: skip
    """One line per named series; ``x`` is shared or given per series (strings make a category axis)."""
    fig = go.Figure()
    categorical = isinstance(x, list) and bool(x) and isinstance(x[0], str)
    if categorical:
        x = [escape(label) for label in x]  # token labels are data, not markup
    for name, values in series.items():
        fig.add_scatter(x=x[name] if isinstance(x, dict) else x, y=values, name=name, mode="lines")
    fig.update_layout(
        title=title,
        xaxis={"title": x_title, "type": "log" if log_x else "category" if categorical else "linear"},
        yaxis={"title": y_title, "type": "log" if log_y else "linear"},
        legend={"orientation": "h", "y": -0.3},
        height=380,
        margin=MARGIN,
    )
    return fig
