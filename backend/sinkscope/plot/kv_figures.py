"""Figures of the KV-cache lab: which tokens each eviction policy keeps (the data of ``experiments.kv_evict``)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from sinkscope.core.i18n import Text
from sinkscope.plot.explore_figures import MARGIN, category_ticks, escape, heading

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
