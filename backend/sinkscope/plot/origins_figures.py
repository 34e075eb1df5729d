"""Figures of where attention goes and where a sink is made: the key map, the first token's writes, the QK terms.

Each takes plain arrays or the library's results (``findings.origins``, ``experiments.writes``, ``experiments.qk``)
and ``lang``; token strings go through ``escape``.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from sinkscope.core.i18n import Text
from sinkscope.core.names import WRITE_PARTS as PARTS
from sinkscope.plot.explore_figures import BELOW, LEGEND_BELOW, MARGIN, category_ticks, escape, heading

PART_COLORS = {"attention": "#1f77b4", "mlp": "#ff7f0e", "embedding": "#2ca02c", "bias": "#7f7f7f"}
WRITE_KEYS = {"attention": "fig.write_attention", "mlp": "fig.write_mlp"}  # a block's two writes, by part
PART_KEYS = {"embedding": "qk.part_embedding", "attention": "qk.part_attention", "mlp": "qk.part_mlp",
             "bias": "qk.part_bias"}  # fmt: skip
TICKS = 40  # token labels on a key map's axis at most


def part_name(part: tuple[str, int], tr: Text) -> str:
    """A residual component as the QK terms name it: "embedding", "MLP 11", "attention 3", "bias"."""
    kind, block = part
    return tr(PART_KEYS[kind], block=block) if block >= 0 else tr(PART_KEYS[kind])


def fig_key_map(key_sink: np.ndarray, tokens: list[str], lang: str = "en", skip_first: bool = False) -> go.Figure:
    """A layer x key heatmap of key_sink (layer, token): which keys receive attention, layer by layer. With
    ``skip_first`` the first token's column is left out and the colour scale fits the rest (secondary sinks)."""
    tr = Text(lang)
    first = 1 if skip_first else 0
    values = key_sink[:, first:]
    labels = [f"{j}:{escape(token)}" for j, token in enumerate(tokens)][first:]
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=labels,
            y=np.arange(values.shape[0]),
            zmin=0,
            zmax=None if skip_first else 1,
            colorscale="Reds",
            colorbar={"title": {"text": tr.metric("key_sink")}},
            hovertemplate=tr("fig.key_hover") + "<extra></extra>",
        )
    )
    title = tr("fig.key_map_past_first" if skip_first else "fig.key_map")
    fig.update_layout(
        title=heading(title, width=60),
        xaxis={"title": tr("fig.key"), "type": "category", **category_ticks(labels, TICKS)},
        yaxis={"title": tr("fig.layer"), "autorange": "reversed"},
        height=max(320, 12 * values.shape[0] + 160),
        margin=MARGIN,
    )
    return fig


def fig_first_writes(attn_write: np.ndarray, mlp_write: np.ndarray, lang: str = "en") -> go.Figure:
    """||a[0]|| and ||m[0]|| per block, on a log scale: the blocks that write most to the first token."""
    tr = Text(lang)
    fig = go.Figure()
    blocks = np.arange(len(attn_write))
    for part, values in zip(PARTS, (attn_write, mlp_write), strict=True):
        fig.add_scatter(x=blocks, y=values, name=tr(WRITE_KEYS[part]), mode="lines+markers",
                        line={"color": PART_COLORS[part]})  # fmt: skip
    fig.update_layout(
        title=heading(tr("fig.first_writes"), width=60),
        xaxis={"title": tr("fig.block"), "dtick": 2},
        yaxis={"title": tr("fig.write_norm"), "type": "log"},
        legend=LEGEND_BELOW,
        height=380,
        margin=BELOW,
    )
    return fig


def fig_channel_writes(in_channel: np.ndarray, channel: int, lang: str = "en") -> go.Figure:
    """What each block's attention and MLP write into one channel of the first token (part, block)."""
    tr = Text(lang)
    fig = go.Figure()
    for part, values in zip(PARTS, in_channel, strict=True):
        fig.add_bar(x=np.arange(len(values)), y=values, name=tr(WRITE_KEYS[part]),
                    marker_color=PART_COLORS[part])  # fmt: skip
    fig.update_layout(
        title=heading(tr("fig.channel_writes", channel=channel), width=60),
        xaxis={"title": tr("fig.block"), "dtick": 2},
        yaxis={"title": tr("fig.value")},
        barmode="group",
        legend=LEGEND_BELOW,
        height=380,
        margin=BELOW,
    )
    return fig


def fig_qk_terms(
    parts: list[tuple[tuple[str, int], float]], rest: float, score: float, where: dict[str, int], lang: str = "en"
) -> go.Figure:
    """Horizontal bars: the largest terms of a head's score on key 0, what the others add up to, and the score;
    ``where`` names the head and queries (layer, head, first, last)."""
    tr = Text(lang)
    names = [part_name(part, tr) for part, _ in parts] + [tr("fig.qk_rest")]
    values = [value for _, value in parts] + [rest]
    colors = [PART_COLORS[part[0]] for part, _ in parts] + ["#bbbbbb"]
    fig = go.Figure(go.Bar(x=values, y=names, orientation="h", marker_color=colors,
                           hovertemplate="%{y}: %{x:.3f}<extra></extra>"))  # fmt: skip
    fig.add_vline(x=0, line_color="#444", line_width=1)
    fig.update_layout(
        title=heading(tr("fig.qk_title", **where), tr("fig.qk_sum", score=score, total=sum(values)), width=60),
        xaxis={"title": tr("fig.qk_term")},
        yaxis={"autorange": "reversed"},
        height=max(300, 26 * len(names) + 140),
        margin=MARGIN,
    )
    return fig
