"""Lesson 1: softmax must spend one unit of attention, so spare attention has to land somewhere."""

import numpy as np
import pandas as pd
import streamlit as st

from backend import figures, metrics
from backend.capture import Trace
from backend.lesson_figures import fig_softmax_variants
from backend.tokens import token_labels
from views import common, lessons, url_state

PRESETS = {
    "Nothing relevant": "0.2, -0.1, 0.1, 0.0, -0.2, 0.1",
    "One clear match": "0.0, 0.1, 6.0, -0.1, 0.0, 0.2",
    "Two matches": "0.0, 4.0, 0.1, 0.0, 4.0, -0.1",
}
MAX_KEYS = 16


def _load_preset() -> None:
    st.session_state["sm_scores"] = PRESETS[st.session_state["sm_preset"]]


def parse_scores(text: str) -> np.ndarray:
    """'1, 2.5, -3' -> array; ValueError with a message a person can act on."""
    parts = [p for p in text.replace(";", ",").split(",") if p.strip()]
    if not 1 <= len(parts) <= MAX_KEYS:
        raise ValueError(f"Give between 1 and {MAX_KEYS} scores, separated by commas.")
    try:
        values = np.array([float(p) for p in parts])
    except ValueError:
        raise ValueError("Scores must be numbers, like 0.5, -1, 3.") from None
    if not np.isfinite(values).all() or np.abs(values).max() > 50:
        raise ValueError("Keep every score between -50 and 50.")
    return values


def toy_row() -> None:
    st.session_state.setdefault("sm_preset", "Nothing relevant")
    st.session_state.setdefault("sm_scores", PRESETS["Nothing relevant"])
    st.radio("Preset", list(PRESETS), key="sm_preset", horizontal=True, on_change=_load_preset)
    text = st.text_input("Attention scores of one query against its keys (q·k/√d)", key="sm_scores")
    try:
        scores = parse_scores(text)
    except ValueError as err:
        st.error(str(err))
        return
    controls = st.columns(2)
    sink_logit = controls[0].slider("Sink logit s (gpt-oss)", -5.0, 10.0, 2.0, 0.5, key="sm_sink_logit")
    bias = controls[1].slider("Sigmoid bias b (−ln T is common)", -8.0, 4.0, -1.8, 0.1, key="sm_bias")
    weights = {
        "softmax": metrics.softmax(scores),
        "softmax+1": metrics.softmax_plus_one(scores),
        f"sink logit s={sink_logit:g}": metrics.sink_logit_softmax(scores, sink_logit),
        f"sigmoid b={bias:g}": metrics.sigmoid_attention(scores, bias),
    }
    labels = [f"k{j}" for j in range(len(scores))]
    st.plotly_chart(fig_softmax_variants(labels, weights), key="sm_bars")
    st.caption(
        "With nothing relevant, softmax still hands out one full unit: spread thin, it mixes every value "
        "together. Softmax+1 and a sink logit can keep most of it back; sigmoid gives each key its own yes or no."
    )
    numeric_check(scores)


def numeric_check(scores: np.ndarray) -> None:
    """softmax+1(x) == softmax([0, x]) without its first entry: a silent key with logit 0 and value 0."""
    plus_one = metrics.softmax_plus_one(scores)
    extended = metrics.softmax(np.concatenate([[0.0], scores]))
    columns = {"softmax+1(x)": plus_one, "softmax([0, x])[1:]": extended[1:]}
    table = pd.DataFrame(columns, index=[f"k{j}" for j in range(len(scores))])
    st.markdown("**Check:** softmax+1 is plain softmax with one extra key of logit 0 whose value is zero.")
    st.dataframe(table.T, key="sm_check")
    st.caption(
        f"Largest difference {np.abs(plus_one - extended[1:]).max():.1e}; the extra key takes "
        f"{extended[0]:.4f}, exactly the withheld mass 1 − Σ = {metrics.withheld_mass(plus_one):.4f}."
    )


def on_the_model(request: common.Request, trace: Trace) -> None:
    layer, head = common.pick_head(trace)
    maps = common.get_layer_maps(request, trace.token_ids, layer)
    labels = token_labels(trace.tokens)
    series = {
        "withheld by softmax+1": maps.withheld[head].tolist(),
        "attention to the first token": maps.weights[head][:, 0].tolist(),
    }
    title = f"Layer {layer}, head {head}: what softmax+1 would keep back, per query"
    st.plotly_chart(figures.fig_lines(labels, series, title, "query token", "share of one unit"), key="sm_withheld")
    st.plotly_chart(figures.fig_head_map(trace.heads, "withheld"), key="sm_withheld_map")
    st.caption(
        "Counterfactual: the model was trained with softmax. These are its own pre-softmax scores, "
        "re-normalized with softmax+1 (withheld = 1 / (1 + Σ_j e^{s_j})). Large scores everywhere, as on a "
        "sink, leave little to withhold: the sink *is* the model's way of withholding."
    )


def paper(trace: Trace) -> None:
    lessons.paper_table(
        [
            ("sink rate, eps 0.3: softmax", "34.89%", f"{trace.sink_rate():.1f}% (T = {trace.n_tokens})"),
            ("sink rate, eps 0.3: softmax+1", "16.36%", "trained with softmax"),
            ("sink rate, eps 0.3: gpt-oss sink logit", "8.78%", "trained with softmax"),
            ("sink rate, eps 0.3: softpick", "0.00%", "trained with softmax"),
            ("mean mass softmax+1 would withhold", "not reported", f"{metrics.nan_mean(trace.heads['withheld']):.3f}"),
        ],
        "Zuhri et al. 2025 (Softpick), 340M models; Miller 2023 (Attention is off by one)",
    )


st.title("Softmax must spend one unit")
st.markdown(
    "Every attention row is a softmax, so its weights always add up to exactly **one**, even when no key "
    "is worth reading. The spare weight has to go somewhere. Trained models learn to park it on a key every "
    "query can see and whose value carries almost nothing: the first token, the **attention sink**."
)
toy_row()
analysis = lessons.analysis()
if analysis is not None:
    st.subheader("On your model")
    on_the_model(analysis.request, analysis.trace)
    paper(analysis.trace)
url_state.sync_url()
