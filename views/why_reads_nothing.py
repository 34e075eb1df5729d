"""Lesson 2: the sink reads nothing. Attending to it is how a head switches itself off."""

import numpy as np
import streamlit as st

from backend import figures
from backend.capture import Trace
from backend.lesson_figures import fig_sink_scatter
from backend.metrics import value_weighted
from backend.tokens import token_labels
from views import common, lessons, url_state


def one_head(request: common.Request, trace: Trace) -> None:
    heads = trace.heads
    # start on the clearest "attends but reads little" head
    layer, head = common.pick_head(trace, np.where(heads["sink"] > 0.5, heads["sink"] - heads["value_sink"], -1))
    cells = st.columns(4)
    cells[0].metric("attention to the first token (sink)", f"{heads['sink'][layer, head]:.3f}")
    cells[1].metric("share of output from it (value_sink)", f"{heads['value_sink'][layer, head]:.3f}")
    cells[2].metric("its value norm / median value norm", f"{heads['value_norm_ratio'][layer, head]:.2f}")
    cells[3].metric("kind", str(heads["kind"][layer, head]))
    maps = common.get_layer_maps(request, trace.token_ids, layer)
    labels = token_labels(trace.tokens)
    raw = figures.fig_attention(maps.weights[head], labels, labels, "Where it looks: A[t,j]")
    read = value_weighted(maps.weights[head], maps.value_norms[head])
    read_fig = figures.fig_attention(read, labels, labels, "What it reads: A[t,j]·‖v_j W_O‖, per row")
    left, right = st.columns(2)
    left.plotly_chart(raw, key="rn_raw")
    right.plotly_chart(read_fig, key="rn_read")
    typical = float(np.median(maps.value_norms[head][1:])) if trace.n_tokens > 1 else float("nan")
    series = {
        "‖head output‖ for this query": maps.output_norms[head].tolist(),
        "a typical token's ‖v_j W_O‖ (median)": [typical] * trace.n_tokens,
    }
    title = f"Layer {layer}, head {head}: how much it writes into the residual stream"
    st.plotly_chart(figures.fig_lines(labels, series, title, "query token", "norm"), key="rn_output")
    st.caption(
        "A sink head's rows are dark on the first column, yet the value-weighted map moves the weight "
        "elsewhere and the output stays far below a typical value: it looks, but writes almost nothing."
    )


def key_geometry(request: common.Request, trace: Trace) -> dict[str, np.ndarray] | None:
    found = lessons.attempt(lambda: lessons.geometry(request, trace.token_ids))
    if found is None:
        return None
    layers = list(range(len(found["first_key_norm"])))
    norms = {
        "first token's key": found["first_key_norm"].tolist(),
        "other keys (median)": found["other_key_norm"].tolist(),
    }
    cosines = {
        "with the first token's key": found["first_key_cosine"].tolist(),
        "with earlier keys (mean)": found["other_key_cosine"].tolist(),
    }
    left, right = st.columns(2)
    left.plotly_chart(
        figures.fig_lines(layers, norms, "Key norm per layer (mean over heads)", "layer", "‖k‖"), key="rn_key_norm"
    )
    right.plotly_chart(
        figures.fig_lines(layers, cosines, "Mean cosine of queries with keys", "layer", "cosine"), key="rn_key_cos"
    )
    st.caption(
        "The first token's key is short, yet every query points towards it: a small, always-matching key "
        "behaves like a bias that collects spare attention (Gu et al. 2025). Cosines are after the rotary "
        "embedding, as the softmax sees them."
    )
    return found


def paper(trace: Trace, found: dict[str, np.ndarray] | None) -> None:
    sink_heads = trace.heads["kind"] == "sink"
    value_ratio = np.nanmedian(trace.heads["value_norm_ratio"][sink_heads]) if sink_heads.any() else float("nan")
    key_ratio = np.median(found["first_key_norm"] / found["other_key_norm"]) if found is not None else float("nan")
    lessons.paper_table(
        [
            (
                "first token's hidden-state norm / median",
                "huge",
                f"up to {np.nanmax(trace.layers['first_norm_ratio']):.0f}x",
            ),
            ("first token's key norm / other keys", "small", f"{key_ratio:.2f} (median over layers)"),
            ("first token's value norm / median, in sink heads", "small", f"{value_ratio:.2f}"),
            ("sink rate, eps 0.3, natural text", "LLaMA2-7B 92.47%, GPT2-XL 77.00%", f"{trace.sink_rate():.1f}%"),
        ],
        "Gu et al., When attention sink emerges in language models, ICLR 2025 (T = 64)",
    )


st.title("The sink reads nothing")
st.markdown(
    "A head that puts most of its weight on the first token should copy the first token's value. It "
    "doesn't, because that value is tiny: the output comes from the little weight left on the other keys. "
    "Attending to the sink is a **near no-op**: the way a head says *nothing here concerns me*."
)
analysis = lessons.analysis()
if analysis is not None:
    request, trace = analysis.request, analysis.trace
    one_head(request, trace)
    st.subheader("Every head: does it read what it attends to?")
    st.plotly_chart(fig_sink_scatter(trace.heads), key="rn_scatter")
    st.subheader("Why every query finds the first token")
    paper(trace, key_geometry(request, trace))
url_state.sync_url()
