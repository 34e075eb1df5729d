"""Plotly figures of Sinkscope's results: data (a Trace's arrays, maps) in, ``go.Figure`` out.

Imports no torch, so it loads fast and works on saved results. Every function takes ``lang``
("en", "fr" or "pt") for its titles and labels. In Jupyter a returned figure displays itself::

    >>> import numpy as np
    >>> from sinkscope import plot
    >>> maps = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]  # (query_pos, key_pos): uniform causal rows
    >>> fig = plot.fig_attention(maps, list("abcd"), list("abcd"), "uniform attention")
    >>> fig.layout.title.text
    'uniform attention'
"""

from sinkscope.plot.census_figures import (
    fig_census_kinds,
    fig_census_layers,
    fig_census_rate,
    fig_census_spread,
    fig_diff_map,
)
from sinkscope.plot.explore_figures import (
    KIND_COLORS,
    escape,
    fig_attention,
    fig_cache_membership,
    fig_depth_profile,
    fig_head_map,
    fig_kind_counts,
    fig_lines,
    fig_ppl_vs_sinks,
    fig_stream_check,
    fig_stream_nll,
    fig_thumbnails,
    figure_html,
)
from sinkscope.plot.html_figures import FIGURES_CSS, head_map_html, kind_counts_html, lit_text_html
from sinkscope.plot.kv_figures import fig_head_needs, fig_kept, fig_policy_curve, fig_sink_heads
from sinkscope.plot.lesson_figures import (
    fig_channel_map,
    fig_kind_output,
    fig_magnitudes,
    fig_sink_scatter,
    fig_smoothing_depth,
    fig_softmax_variants,
)
from sinkscope.plot.origins_figures import (
    WRITE_KEYS,
    fig_channel_writes,
    fig_first_writes,
    fig_key_map,
    fig_qk_terms,
)

__all__ = [
    "FIGURES_CSS",
    "KIND_COLORS",
    "WRITE_KEYS",
    "escape",
    "fig_attention",
    "fig_census_kinds",
    "fig_census_layers",
    "fig_census_rate",
    "fig_census_spread",
    "fig_channel_writes",
    "fig_diff_map",
    "fig_cache_membership",
    "fig_channel_map",
    "fig_depth_profile",
    "fig_first_writes",
    "fig_head_map",
    "fig_kind_counts",
    "fig_kind_output",
    "fig_kept",
    "fig_head_needs",
    "fig_sink_heads",
    "fig_policy_curve",
    "fig_key_map",
    "fig_magnitudes",
    "fig_lines",
    "fig_ppl_vs_sinks",
    "fig_qk_terms",
    "fig_stream_check",
    "fig_sink_scatter",
    "fig_smoothing_depth",
    "fig_softmax_variants",
    "fig_stream_nll",
    "fig_thumbnails",
    "figure_html",
    "head_map_html",
    "kind_counts_html",
    "lit_text_html",
]
