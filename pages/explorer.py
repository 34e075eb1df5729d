"""Explorer: which heads sink, which look at themselves, and what each one reads."""

import pandas as pd
import streamlit as st

from backend.figures import fig_head_map, fig_kind_counts
from backend.metrics import DEFAULT_EPS, HEAD_METRICS
from pages import common

st.title("Attention sinks, head by head")
trace = common.current_trace(common.sidebar())
if trace is not None:
    eps = st.slider("Sink threshold eps", 0.05, 0.95, DEFAULT_EPS, 0.05, key="eps")
    st.metric(f"Sink rate (eps = {eps:.2f}, T = {trace.n_tokens})", f"{trace.sink_rate(eps):.1f}% of heads")
    metric = st.radio("Colour heads by", HEAD_METRICS, horizontal=True, key="metric")
    left, right = st.columns([3, 2])
    left.plotly_chart(fig_head_map(trace.heads, metric), key="head_map")
    right.plotly_chart(fig_kind_counts(trace.heads["kind"]), key="kind_counts")
    st.dataframe(pd.DataFrame(trace.head_rows()), hide_index=True, key="heads_table")
