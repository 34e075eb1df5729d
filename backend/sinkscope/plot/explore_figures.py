"""Figures of the explorer and the streaming page: data in, ``go.Figure`` out (Jupyter shows them as they are).

Token strings are data, never markup: every label and hover text goes through ``escape``.
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from sinkscope.core.arrays import bin_labels, cache_band, pool_max
from sinkscope.core.i18n import Text
from sinkscope.core.metrics import nan_mean, shown_metrics
from sinkscope.core.names import TITLES, Kind

MARGIN = {"l": 50, "r": 20, "t": 50, "b": 40}
BELOW = {"l": 50, "r": 20, "t": 50, "b": 110}  # room for a legend under the axis title
LEGEND_BELOW = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"}  # not over the axis title
WHOLE_TICKS = 12  # up to this many layers an axis ticks every one; Plotly's own choice beyond
TITLE_SIZE, TITLE_LINE, TITLE_PAD = 15, 24, 36  # a heading's letters, px per line of them, room under it
KIND_COLORS = {Kind.SINK: "#d62728", Kind.DIAGONAL: "#1f77b4", Kind.PREVIOUS_TOKEN: "#2ca02c", Kind.MIXED: "#bbbbbb"}


def heading(text: str, subtitle: str = "", width: int = 34) -> dict[str, object]:
    """A figure title on lines of at most ``width`` characters, with the margin it needs: Plotly does not wrap,
    and a half-width figure at 1024 px cut long titles off. The subtitle is the title's last lines in a smaller
    grey font, not Plotly's own subtitle, which is drawn under the title's anchor, into the plot."""
    lines = "<br>".join(textwrap.wrap(text, width))
    below = "<br>".join(textwrap.wrap(subtitle, width + 6))  # 12 px letters: as wide as the title's 15 px lines
    return {
        "text": lines + (f"<br><span style='font-size:12px;color:#666'>{below}</span>" if below else ""),
        "font": {"size": TITLE_SIZE},
        "automargin": True,
        "yref": "paper",  # above the plot area (y 1, anchored at its bottom): the top margin grows to hold it
        "y": 1,
        "yanchor": "bottom",
        "pad": {"b": 28},  # clear of the top tick label, which reaches above the plot area
    }


def room_for_title(fig: go.Figure) -> go.Figure:
    """A heatmap ``fig`` with a top margin that already holds its heading's lines. Plotly grows the margin itself
    (the title's automargin), but a heatmap drawn before it grows keeps the old plot height: its rows slide off
    their ticks (seen in the browser and in static exports of two-line headings under a 50 px margin). Other
    figures are left to the automargin, which places their titles best."""
    text, size = fig.layout.title.text or "", fig.layout.title.font.size or TITLE_SIZE
    needed = round(TITLE_LINE * size / TITLE_SIZE) * (text.count("<br>") + 1) + TITLE_PAD if text else 0
    if any(trace.type == "heatmap" for trace in fig.data) and (fig.layout.margin.t or 0) < needed:
        fig.update_layout(margin_t=needed)
    return fig


def whole_ticks(count: int) -> dict[str, object]:
    """Ticks on whole numbers only: a two-layer model's axis reads 0 and 1, never -0.5 or 1.5."""
    return {"dtick": 1, "tickformat": "d"} if count <= WHOLE_TICKS else {}


def escape(text: str) -> str:
    """Plotly renders a subset of HTML in labels: escape it so tokens show literally."""
    return html.escape(text, quote=False)


def colorscale(metric: str) -> tuple[tuple[float, str], ...]:
    """((position, colour), ...) of a head metric's scale, as Plotly resolves its name: one scale for every map."""
    return go.Heatmap(colorscale="Reds" if metric in ("sink", "value_sink") else "Viridis").colorscale


def head_map_title(metric: str, tr: Text) -> str:
    return tr("fig.named", name=tr.metric(metric), value=tr(TITLES[metric]))


def fig_head_map(heads: dict[str, np.ndarray], metric: str, lang: str = "en") -> go.Figure:
    """A layer x head heatmap of one per-head metric; hover shows all five and the kind.

    An invisible marker sits on every cell, because Plotly selects points but not heatmap cells: clicking
    a cell selects its marker, whose (x, y) is (head, layer).
    """
    tr = Text(lang)
    values = heads[metric]
    n_layers, n_heads = values.shape
    layer, head = np.indices(values.shape)
    shown = shown_metrics(heads)
    custom = np.stack([heads[m] for m in shown], axis=-1).reshape(-1, len(shown))  # (cell, metric)
    kinds = np.vectorize(tr.kind)(heads["kind"]).ravel()
    lines = [tr("fig.named", name=tr.metric(m), value=f"%{{customdata[{i}]:.3f}}") for i, m in enumerate(shown)]
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=np.arange(n_heads),
            y=np.arange(n_layers),
            zmin=0,
            zmax=1,
            colorscale=colorscale(metric),
            colorbar={"title": {"text": tr.metric(metric)}},
            hoverinfo="skip",
        )
    )
    fig.add_scatter(
        x=head.ravel(),
        y=layer.ravel(),
        mode="markers",
        marker={"symbol": "square", "size": 14, "opacity": 0},
        selected={"marker": {"opacity": 0}},
        unselected={"marker": {"opacity": 0}},
        customdata=custom,
        text=kinds,
        hovertemplate=tr("fig.head_hover") + "<br>" + "<br>".join(lines) + "<br>" + tr("fig.kind_hover"),
        showlegend=False,
    )
    fig.update_layout(
        title=heading(head_map_title(metric, tr)),
        xaxis={"title": tr("fig.head"), "dtick": 1, "range": [-0.5, n_heads - 0.5]},
        yaxis={"title": tr("fig.layer"), "range": [n_layers - 0.5, -0.5], **whole_ticks(n_layers)},  # top down
        height=max(320, 18 * n_layers + 120),
        margin=MARGIN,
        clickmode="event+select",
    )
    return fig


def fig_kind_counts(kinds: np.ndarray, lang: str = "en") -> go.Figure:
    """Stacked bars: how many heads of each kind every layer has."""
    tr = Text(lang)
    layers = np.arange(kinds.shape[0])
    fig = go.Figure()
    for kind, color in KIND_COLORS.items():
        fig.add_bar(x=layers, y=(kinds == kind).sum(1), name=tr.kind(kind), marker_color=color)
    fig.update_layout(
        barmode="stack",
        title=heading(tr("fig.kinds_title")),
        xaxis={"title": tr("fig.layer"), "dtick": 5},
        yaxis={"title": tr("fig.heads")},
        height=400,
        margin=BELOW,
        legend=LEGEND_BELOW,
    )
    return fig


def category_ticks(labels: list[str], most: int, longest: int = 12) -> dict[str, object]:
    """Axis settings that label at most ``most`` evenly spaced categories, each cut to ``longest`` characters:
    58 rotated token labels in a half-width figure overlap into a smear. The hover keeps the full label."""
    shown = labels[:: max(1, math.ceil(len(labels) / most))]
    short = [label if len(label) <= longest else label[: longest - 1] + "…" for label in shown]
    return {"tickmode": "array", "tickvals": shown, "ticktext": short}


def fig_attention(
    matrix: np.ndarray,
    row_labels: list[str],
    col_labels: list[str],
    title: str,
    log_scale: bool = False,
    max_cells: int = 256,
    subtitle: str = "",
    lang: str = "en",
    ghost: np.ndarray | None = None,
    unit: str | None = None,
) -> go.Figure:
    """One head's (query, key) map with token labels; pooled (max) when larger than max_cells. The subtitle
    (a formula, the pooling) is a second line: half-width figures cut long titles off.

    ``unit`` names what the cells count (a catalogue key) and fixes the linear scale at 0..1 of that unit: a map
    in units of a typical value must not rescale to its own maximum, or a faint sink column turns dark again.

    ``ghost`` (query,) is the mass each query gave a learned sink logit (gpt-oss): drawn as a labelled column
    left of the first key, on the same colour scale, so a row's cells and its ghost add up to one."""
    tr = Text(lang)
    pooled, row_starts, col_starts = pool_max(np.asarray(matrix, dtype=np.float64), max_cells)
    rows = [escape(s) for s in bin_labels(row_starts, matrix.shape[0], row_labels)]
    cols = [escape(s) for s in bin_labels(col_starts, matrix.shape[1], col_labels)]
    key_ticks = category_ticks(cols, 10)
    if ghost is not None:  # its label always shown, whole: the keys' labels are thinned and cut
        ghost_rows, _, _ = pool_max(np.asarray(ghost, dtype=np.float64)[:, None], max_cells)  # (rows, 1)
        label = tr("fig.learned_sink_column")
        pooled, cols = np.hstack([ghost_rows, pooled]), [label, *cols]
        key_ticks = {
            **key_ticks,
            "tickvals": [label, *key_ticks["tickvals"]],
            "ticktext": [label, *key_ticks["ticktext"]],
        }
    shown = np.where(pooled > 0, np.log10(np.where(pooled > 0, pooled, 1)), np.nan) if log_scale else pooled
    colorbar = {  # below the map, not beside it: a half-width figure needs its width for the keys
        "title": {"text": tr("fig.log_weight" if log_scale else unit or "fig.weight"), "side": "right"},
        "orientation": "h", "thickness": 10, "yref": "container", "y": 0.01, "yanchor": "bottom",
        "xref": "paper", "x": 0.5, "xanchor": "center", "lenmode": "fraction", "len": 0.8,
    }  # fmt: skip
    heatmap = go.Heatmap(
        z=shown.astype(np.float32),
        x=cols,
        y=rows,
        colorscale="Blues",
        zmin=-4 if log_scale else 0,
        zmax=0 if log_scale else 1.0 if unit else float(np.nanmax(pooled)) if np.isfinite(pooled).any() else 1,
        colorbar=colorbar,
        hovertemplate=tr("fig.map_hover", weight=tr("fig.log_weight" if log_scale else "fig.weight")),
        hoverongaps=False,
    )
    fig = go.Figure(heatmap)
    if ghost is not None:  # between the ghost and the first real key
        fig.add_vline(x=0.5, line={"color": "#888", "width": 1, "dash": "dot"})
    pooled_note = tr("fig.pooled", rows=len(rows), cols=len(cols)) if len(rows) < matrix.shape[0] else ""
    subtitle = " · ".join(part for part in (subtitle, pooled_note) if part)
    fig.update_layout(
        title=heading(title, subtitle),
        xaxis={
            "title": tr("fig.key_axis"),
            "type": "category",
            "tickangle": -60,
            "automargin": True,
            **key_ticks,
        },
        yaxis={
            "title": tr("fig.query_axis"),
            "type": "category",
            "autorange": "reversed",
            "automargin": True,
            **category_ticks(rows, 32),
        },
        height=620,
        margin={"l": 10, "r": 10, "t": 70, "b": 60},  # the axes make room for their labels; the colour bar below
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


def fig_thumbnails(thumbs: np.ndarray, row_name: str, title: str, lang: str = "en", first_row: int = 0) -> go.Figure:
    """A grid of small maps as one compact PNG-encoded image (not one trace per head); rows are numbered from
    ``first_row`` (one layer's strip is labelled with that layer)."""
    tr = Text(lang)
    n_rows, n_cols, h, w = thumbs.shape
    gap = 2
    image = thumbnail_image(thumbs, gap)
    fig = go.Figure(go.Image(source=png_data_url(image), hoverinfo="skip"))
    step_y, step_x = h + gap, w + gap
    fig.update_layout(
        title=heading(title),
        xaxis={
            "title": tr("fig.head"),
            "tickvals": np.arange(n_cols) * step_x + w / 2,
            "ticktext": list(range(n_cols)),
        },
        yaxis={
            "title": row_name,
            "tickvals": np.arange(n_rows) * step_y + h / 2,
            "ticktext": list(range(first_row, first_row + n_rows)),
        },
        height=thumbnails_height(image.shape),
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
    )
    return fig


GRID_WIDTH = 640  # pixels a grid of maps is drawn across: readable on a projector, a whole layer in one screen
GRID_ROOM = 90  # the title's and the axes' pixels around the image


def thumbnails_height(shape: tuple[int, int]) -> int:
    """A figure height that draws an image of ``shape`` (rows, cols) about GRID_WIDTH wide: Plotly keeps an
    image's aspect, so a fixed height left a tall grid 230 px wide and one small map a thin strip."""
    rows, cols = shape
    return int(np.clip(round(GRID_WIDTH * rows / cols) + GRID_ROOM, 320, 2400))


def png_data_url(image: np.ndarray) -> str:
    """A grayscale uint8 image as a data: URL (PNG), so the browser gets kilobytes, not arrays."""
    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def fig_depth_profile(heads: dict[str, np.ndarray], layers: dict[str, np.ndarray], lang: str = "en") -> go.Figure:
    """Per decoder layer: mean attention to the first token, the first token's cosine with the others in what
    that layer reads (``bos_cosine``), and the first token's norm ratios (log axis)."""
    tr = Text(lang)
    n_layers = heads["sink"].shape[0]
    depth = np.arange(n_layers)
    fig = go.Figure()
    fig.add_scatter(x=depth, y=nan_mean(heads["sink"], 1), name=tr("fig.depth_sink"), yaxis="y")
    reads = layers["bos_cosine"][:n_layers]  # index l: the input norm of decoder layer l applied to h^l
    fig.add_scatter(x=depth, y=reads, name=tr("fig.depth_bos"), yaxis="y", line={"dash": "dash"})
    fig.add_scatter(
        x=depth,
        y=layers["first_norm_ratio"][:n_layers],  # h^l: the residual stream entering decoder layer l
        name=tr("fig.depth_norm"),
        yaxis="y2",
    )
    fig.add_scatter(
        x=depth,
        y=nan_mean(heads["value_norm_ratio"], 1),
        name=tr("fig.depth_value"),
        yaxis="y2",
        line={"dash": "dot"},
    )
    fig.update_layout(
        title=heading(tr("fig.depth_title")),
        xaxis={"title": tr("fig.decoder_layer"), "dtick": 2},
        yaxis={"title": tr("fig.attention_cosine"), "range": [-1, 1]},
        yaxis2={"title": tr("fig.ratio_log"), "type": "log", "dtick": 1, "overlaying": "y", "side": "right"},
        legend=LEGEND_BELOW,
        height=420,
        margin={**BELOW, "r": 50},
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


def fig_stream_nll(
    curves: dict[str, np.ndarray], labels: dict[str, str], cache_size: int, width: int, lang: str = "en"
) -> go.Figure:
    """Per-token NLL (rolling mean) against position, one line per method; a line where the cache fills."""
    tr = Text(lang)
    fig = go.Figure()
    for method, nll in curves.items():
        fig.add_scatter(x=np.arange(1, len(nll) + 1), y=rolling_mean(nll, width), name=labels.get(method, method))
    fig.add_vline(x=cache_size, line_dash="dash", annotation_text=tr("fig.cache_full"))
    fig.update_layout(
        title=heading(tr("fig.stream_title", width=width)),
        xaxis={"title": tr("fig.position")},
        yaxis={"title": tr("fig.nll")},
        legend=LEGEND_BELOW,
        height=440,
        margin=BELOW,
    )
    return fig


def fig_ppl_vs_sinks(sinks: list[int], ppl: list[float], cache_size: int, engine: str, lang: str = "en") -> go.Figure:
    """Perplexity against the number of sink tokens at one fixed cache size (Xiao et al., Table 2)."""
    tr = Text(lang)
    fig = go.Figure(go.Bar(x=[str(s) for s in sinks], y=ppl, texttemplate="%{y:.2f}", textposition="outside"))
    fig.update_layout(
        title=heading(tr("fig.sweep_title", cache=cache_size, engine=engine)),
        xaxis={"title": tr("fig.sink_tokens"), "type": "category"},  # counts are names of bars, not a scale
        yaxis={"title": tr("fig.perplexity"), "type": "log"},
        height=380,
        margin=MARGIN,
    )
    return fig


def fig_stream_check(ppl: dict[str, float], sizes: dict[str, int], engine: str, lang: str = "en") -> go.Figure:
    """Dense, the last ``cache`` tokens alone, and ``sinks`` first tokens + the last ``window``: one horizontal bar
    each on a linear axis from zero, so a bar three times as long is three times the perplexity."""
    tr = Text(lang)
    names = {"dense": tr("fig.check_dense"), "window": tr("fig.check_window", **sizes),
             "sinks": tr("fig.check_sinks", **sizes)}  # fmt: skip
    fig = go.Figure(go.Bar(y=list(names.values()), x=[ppl[name] for name in names], orientation="h",
                           text=[tr.num(ppl[name], ".1f") for name in names], textposition="outside",
                           cliponaxis=False))  # fmt: skip
    top = max(ppl[name] for name in names)
    fig.update_layout(
        title=heading(tr("fig.check_title", engine=engine, **sizes)),
        xaxis={"title": tr("fig.perplexity"), "range": [0, 1.2 * top]},
        yaxis={"type": "category", "autorange": "reversed", "automargin": True},
        height=380,
        margin=MARGIN,
    )
    return fig


def fig_cache_membership(
    n_tokens: int, sinks: int, window: int, step: int, max_cells: int = 256, lang: str = "en"
) -> go.Figure:
    """Which keys the cache holds at each step (rows): sinks, the recent window, and the chosen step."""
    tr = Text(lang)
    held = cache_band(n_tokens, sinks, window)  # (step, key): the same band the cache keeps
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
            hovertemplate=tr("fig.cache_hover"),
        )
    )
    note = tr("fig.cache_step", step=step, keys=min(step + 1, sinks + window))
    fig.add_hline(y=step, line_color="#d62728", annotation_text=note)
    fig.update_layout(
        title=heading(tr("fig.cache_title", sinks=sinks, window=window)),
        xaxis={"title": tr("fig.key_position")},
        yaxis={"title": tr("fig.step_axis"), "autorange": "reversed"},
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
    counted = isinstance(x, list) and all(isinstance(v, int | np.integer) for v in x)  # layers, blocks
    fig.update_layout(
        title=heading(title),
        xaxis={
            "title": x_title,
            "type": "log" if log_x else "category" if categorical else "linear",
            **(whole_ticks(len(x)) if counted else {}),
        },  # fmt: skip
        yaxis={"title": y_title, "type": "log" if log_y else "linear"},
        legend=LEGEND_BELOW,
        height=380,
        margin=BELOW,
    )
    return fig
