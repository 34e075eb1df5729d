"""The explorer's first two figures as plain HTML, laid out by the stylesheet ``FIGURES_CSS``.

A browser draws them at once. A page's first Plotly chart waits for Plotly's 4.7 MB bundle to be evaluated, and
the page shows none of its elements until then: on a two-core laptop that put the head map 2.6 s after the page
loaded, against 1.2 s this way. Each figure draws the same cells, colours and hover text as its Plotly twin
(``fig_head_map``, ``fig_kind_counts``); hover text is each cell's ``title``.
"""

from __future__ import annotations

import html
from importlib.resources import files

import numpy as np
from plotly.colors import sample_colorscale

from sinkscope.core.i18n import Text
from sinkscope.core.metrics import shown_metrics
from sinkscope.core.names import NO_ATTENTION
from sinkscope.core.tokens import WHITESPACE_MARKERS
from sinkscope.plot.explore_figures import KIND_COLORS, colorscale, head_map_title

FIGURES_CSS = files("sinkscope.plot").joinpath("figures.css").read_text(encoding="utf-8")
BAR_TICKS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def cell_tip(heads: dict[str, np.ndarray], layer: int, head: int, tr: Text) -> str:
    """What hovering one head says: where it is, every metric shown for this model and its kind, one per line."""
    lines = [tr("fig.head_tip", layer=layer, head=head)]
    if heads["kind"][layer, head] == NO_ATTENTION:  # a hybrid's Mamba or linear layer: nothing was measured
        return "\n".join([*lines, tr.kind(NO_ATTENTION)])
    lines += [
        tr("fig.named", name=tr.metric(m), value=tr.num(float(heads[m][layer, head]))) for m in shown_metrics(heads)
    ]
    lines.append(tr("fig.kind_tip", kind=tr.kind(heads["kind"][layer, head])))
    return "\n".join(lines)


def cell_fills(values: np.ndarray, metric: str) -> list[str]:
    """One CSS colour per cell, row by row, on the scale's 0..1 range; a missing value leaves its cell empty."""
    flat = values.ravel().astype(float)  # (layer * head,)
    stops = [list(stop) for stop in colorscale(metric)]  # lists: plotly reads a tuple as one colour
    shown = sample_colorscale(stops, np.clip(np.nan_to_num(flat), 0, 1).tolist())
    return [fill if np.isfinite(v) else "transparent" for fill, v in zip(shown, flat, strict=True)]


def colour_bar(metric: str, tr: Text) -> str:
    ramp = ", ".join(f"{colour} {100 * position:g}%" for position, colour in colorscale(metric))
    ticks = "".join(f'<span style="bottom:{100 * v:g}%">{tr.num(v, ".1f")}</span>' for v in BAR_TICKS)
    return (
        f'<div class="ss-bar-title">{html.escape(tr.metric(metric))}</div>'
        f'<div class="ss-bar"><div class="ss-ramp" style="background:linear-gradient(to top, {ramp})"></div>'
        f"{ticks}</div>"
    )


def figure(title: str, name: str, shape: tuple[int, int], body: str) -> str:
    """A ``<figure>`` of class ``ss-{name}`` whose CSS grid knows the model's (layers, heads)."""
    title = html.escape(title)
    style = f"--layers:{shape[0]};--heads:{shape[1]}"
    return (
        f'<figure class="ss-figure ss-{name}" role="group" aria-label="{title}" style="{style}">'
        f'<figcaption>{title}</figcaption><div class="ss-body">{body}</div></figure>'
    )


def axis_titles(tr: Text, x: str, y: str) -> str:
    return f'<div class="ss-y-title">{html.escape(tr(y))}</div><div class="ss-x-title">{html.escape(tr(x))}</div>'


def head_map_html(heads: dict[str, np.ndarray], metric: str, lang: str = "en") -> str:
    """The head map: a cell per head (``data-layer``, ``data-head``, ``data-value``), layer 0 at the top, and a
    colour bar."""
    tr = Text(lang)
    values = heads[metric]
    n_layers, n_heads = values.shape
    fills = iter(cell_fills(values, metric))
    cells = "".join(
        f'<i data-layer="{layer}" data-head="{head}" data-value="{values[layer, head]:.7g}" '
        f'style="background:{next(fills)}" title="{html.escape(cell_tip(heads, layer, head, tr))}"></i>'
        for layer in range(n_layers)
        for head in range(n_heads)
    )
    layer_ticks = "".join(f"<span>{layer}</span>" for layer in range(n_layers))
    head_ticks = "".join(f"<span>{head}</span>" for head in range(n_heads))
    body = (
        f'{axis_titles(tr, "fig.head", "fig.layer")}<div class="ss-y-ticks">{layer_ticks}</div>'
        f'<div class="ss-cells">{cells}</div>{colour_bar(metric, tr)}<div class="ss-x-ticks">{head_ticks}</div>'
    )
    return figure(head_map_title(metric, tr), "head-map", values.shape, body)


def tick_step(most: int, ticks: int = 5) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50... that labels 0..most with at most ``ticks`` + 1 ticks."""
    return next(step for e in range(10) for step in (10**e, 2 * 10**e, 5 * 10**e) if most / step <= ticks)


def layer_bar(counts: dict[str, int], layer: int, n_heads: int, tr: Text) -> str:
    """One layer's stacked bar, the first kind at the bottom; hover gives every kind's count."""
    counted = [tr("fig.named", name=tr.kind(kind), value=n) for kind, n in counts.items()]
    tip = "\n".join([tr("fig.layer_tip", layer=layer), *counted])
    parts = "".join(
        f'<i style="height:{100 * n / n_heads:g}%;background:{KIND_COLORS[k]}"></i>' for k, n in counts.items() if n
    )
    return f'<div data-layer="{layer}" title="{html.escape(tip)}">{parts}</div>'


def kind_counts_html(kinds: np.ndarray, lang: str = "en") -> str:
    """Stacked bars: how many heads of each kind every layer has, with a legend under the axis."""
    tr = Text(lang)
    n_layers, n_heads = kinds.shape
    per_layer = [{k: int((kinds[layer] == k).sum()) for k in KIND_COLORS} for layer in range(n_layers)]
    bars = "".join(layer_bar(counts, layer, n_heads, tr) for layer, counts in enumerate(per_layer))
    step = tick_step(n_heads)
    heads_ticks = "".join(
        f'<span style="bottom:{100 * n / n_heads:g}%">{n}</span>' for n in range(0, n_heads + 1, step)
    )
    layer_step = tick_step(n_layers - 1, 6)
    layer_ticks = "".join(f"<span>{layer if layer % layer_step == 0 else ''}</span>" for layer in range(n_layers))
    legend = "".join(
        f'<span><i style="background:{colour}"></i>{html.escape(tr.kind(kind))}</span>'
        for kind, colour in KIND_COLORS.items()
    )
    body = (
        f'{axis_titles(tr, "fig.layer", "fig.heads")}<div class="ss-y-ticks">{heads_ticks}</div>'
        f'<div class="ss-bars">{bars}</div><div class="ss-x-ticks">{layer_ticks}</div>'
        f'<div class="ss-legend">{legend}</div>'
    )
    return figure(tr("fig.kinds_title"), "kinds", kinds.shape, body)


LIT = (31, 119, 180)  # the shade of attention on a token (Plotly's first colour)
DARK_SHADE = 0.6  # from this shade on, a token's letters turn white to stay readable


def lit_token(position: int, token: str, weight: float, shade: float, query: int, tr: Text) -> str:
    """One token of the lit text, shaded by ``shade`` (its weight over the row's largest; NaN: not shown), pickable."""
    shown = html.escape(token.replace(WHITESPACE_MARKERS[" "], " "))
    if token.endswith(WHITESPACE_MARKERS["\n"]):
        shown += "<br>"
    classes = ["ss-token"] + (["ss-query"] if position == query else []) + (["ss-future"] if position > query else [])
    style = ""
    if np.isfinite(shade):
        style = f"background:rgba({LIT[0]},{LIT[1]},{LIT[2]},{shade:.3f})" + (
            ";color:#fff" if shade >= DARK_SHADE else ""
        )
    tip = tr("fig.lit_tip", position=position, token=token)
    if np.isfinite(weight):
        tip = tr("fig.lit_tip_weight", position=position, token=token, weight=tr.num(weight))
    return (
        f'<span class="{" ".join(classes)}" data-query="{position}" tabindex="0" role="button" style="{style}" '
        f'title="{html.escape(tip)}">{shown}</span>'
    )


def lit_text_html(tokens: list[str], row: np.ndarray, query: int, lang: str = "en") -> str:
    """The text coloured by one query's attention over its keys, as CircuitsVis colours tokens: each key's shade is
    its weight over the row's largest (``row``: (token,) weights of the keys the query sees, NaN where a key is not
    shown, as the first one past the sink). The query is outlined, the tokens after it (which it cannot see) are
    faded; every token names its position and weight on hover, and a click or Enter on it picks it as the query."""
    tr = Text(lang)
    weights = np.full(len(tokens), np.nan)
    weights[: query + 1] = np.asarray(row, dtype=float)[: query + 1]
    largest = np.nanmax(weights) if np.isfinite(weights).any() else 1.0
    shades = weights / largest if largest > 0 else weights
    spans = "".join(
        lit_token(position, token, float(weight), float(shade), query, tr)
        for position, (token, weight, shade) in enumerate(zip(tokens, weights, shades, strict=True))
    )
    return (
        f'<div class="ss-lit" role="group" aria-label="{html.escape(tr("fig.lit_label", query=query))}">{spans}</div>'
    )
