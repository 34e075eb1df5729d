"""Explorer: which heads sink, which look at themselves, and what each one actually reads."""

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

from backend import figures
from backend.capture import HEAD_COLUMNS, LAYER_COLUMNS, Trace
from backend.metrics import DEFAULT_EPS, HEAD_METRICS, value_scaled, value_weighted, without_first_keys
from backend.tokens import token_labels
from views import common, url_state

ZOOM = 256  # the one-head map shows at most ZOOM x ZOOM cells at full resolution


def head_map(trace: Trace) -> None:
    st.session_state.setdefault("eps", DEFAULT_EPS)
    eps = st.slider("Sink threshold eps", 0.05, 0.95, step=0.05, key="eps")
    st.metric(f"Sink rate (eps = {eps:.2f}, T = {trace.n_tokens})", f"{trace.sink_rate(eps):.1f}% of heads")
    st.caption("Share of heads whose mean attention to the first token is above eps (Gu et al., ICLR 2025).")
    metric = st.radio("Colour heads by", HEAD_METRICS, horizontal=True, key="metric")
    left, right = st.columns([3, 2])
    left.plotly_chart(figures.fig_head_map(trace.heads, metric), key="head_map")
    right.plotly_chart(figures.fig_kind_counts(trace.heads["kind"]), key="kind_counts")
    table = pd.DataFrame(trace.head_rows())
    st.dataframe(table, hide_index=True, key="heads_table", height=320)
    layers = pd.DataFrame(trace.layer_rows())
    download = st.columns(2)
    heads_csv = table[list(HEAD_COLUMNS)].to_csv(index=False)
    download[0].download_button("Per-head CSV", heads_csv, "heads.csv", on_click="ignore")
    layers_csv = layers[list(LAYER_COLUMNS)].to_csv(index=False)
    download[1].download_button("Per-layer CSV", layers_csv, "layers.csv", on_click="ignore")


def matrix_to_csv(matrix: np.ndarray, labels: list[str]) -> str:
    return pd.DataFrame(matrix, index=labels, columns=labels).to_csv()


def window_of(n_tokens: int) -> tuple[slice, slice]:
    """Which rows and columns to show at full resolution; everything (pooled) by default."""
    if n_tokens <= ZOOM or not st.toggle("Zoom into a window at full resolution", key="zoom"):
        return slice(None), slice(None)
    top = st.slider("Queries from", 0, n_tokens - ZOOM, 0, key="query_start")
    left = st.slider("Keys from", 0, n_tokens - ZOOM, 0, key="key_start")
    return slice(top, top + ZOOM), slice(left, left + ZOOM)


def head_summary(trace: Trace, layer: int, head: int) -> None:
    heads = trace.heads
    cells = st.columns(4)
    cells[0].metric("sink", f"{heads['sink'][layer, head]:.3f}")
    cells[1].metric("value_sink", f"{heads['value_sink'][layer, head]:.3f}")
    cells[2].metric("first value norm / median", f"{heads['value_norm_ratio'][layer, head]:.2f}")
    cells[3].metric("kind", str(heads["kind"][layer, head]))


@st.fragment
def one_head(request: common.Request, trace: Trace) -> None:
    """Scrubbing layer and head reruns only this fragment: the model is never run again here."""
    layer, head = common.pick_head(trace)
    options = st.columns(2)
    log_scale = options[0].toggle("Log colour scale", key="log_scale")
    past_sink = options[1].toggle("Look past the sink", key="past_sink", help=common.PAST_SINK_HELP)
    maps = common.get_layer_maps(request, trace.token_ids, layer)
    head_summary(trace, layer, head)
    labels = token_labels(trace.tokens)
    rows, cols = window_of(trace.n_tokens)
    raw, first_key = maps.weights[head], 0
    if past_sink:
        raw, first_key = without_first_keys(raw), 1  # renormalized over keys 1..t: the structure under the sink
    title = f"Layer {layer}, head {head}" + (": past the sink" if past_sink else "")
    fig = figures.fig_attention(raw[rows, cols], labels[rows], labels[first_key:][cols], title, log_scale, ZOOM)
    if options[0].toggle("Reads in units of a typical value (rows not normalized)", key="value_units"):
        weighted = value_scaled(maps.weights[head], maps.value_norms[head])
        read_title = "What it writes: A[t,j]·‖v_j W_O‖ / median ‖v W_O‖"
    else:
        weighted = value_weighted(maps.weights[head], maps.value_norms[head])
        read_title = "What it reads: A[t,j]·‖v_j W_O‖, normalized per row"
    read = figures.fig_attention(weighted[rows, cols], labels[rows], labels[cols], read_title, log_scale, ZOOM)
    left, right = st.columns(2)
    left.plotly_chart(fig, key="one_head_map")
    right.plotly_chart(read, key="value_weighted_map")
    name = f"layer{layer}_head{head}"
    download = st.columns(2)  # callables: the files are built only when clicked
    matrix_csv = partial(matrix_to_csv, maps.weights[head], labels)
    download[0].download_button("This head's matrix (CSV)", matrix_csv, f"{name}.csv", on_click="ignore")
    page = partial(figures.figure_html, fig)
    download[1].download_button("This figure (HTML)", page, f"{name}.html", on_click="ignore")
    layer_thumbs = np.stack([figures.pool_max(m, 64)[0] for m in maps.weights])[None]  # (1, head, rows, cols)
    st.plotly_chart(figures.fig_thumbnails(layer_thumbs, "layer", f"Every head of layer {layer}"), key="layer_heads")
    url_state.sync_url()


def all_heads(request: common.Request, trace: Trace) -> None:
    thumbs = common.get_thumbnails(request, trace.token_ids)
    title = f"All {thumbs.shape[0]} layers x {thumbs.shape[1]} heads (each max-pooled, scaled to its own peak)"
    st.plotly_chart(figures.fig_thumbnails(thumbs, "layer", title), key="all_heads")
    st.caption("A dark left column is a sink head; a dark diagonal is a head that attends to itself.")


st.title("Attention sinks, head by head")
analysis = common.current_analysis(common.sidebar())
if analysis is not None:
    request, trace = analysis.request, analysis.trace
    tabs = st.tabs(["Head map", "One head", "All heads", "Depth profile"])
    with tabs[0]:
        head_map(trace)
    with tabs[1]:
        one_head(request, trace)
    with tabs[2]:
        all_heads(request, trace)
    with tabs[3]:
        st.plotly_chart(figures.fig_depth_profile(trace.heads, trace.layers["first_norm_ratio"]), key="depth")
url_state.sync_url()
