"""Lesson 3: massive activations, a few huge channels of the first token that act as fixed biases."""

import numpy as np
import pandas as pd
import streamlit as st

from backend import figures, interventions
from backend.capture import Trace
from backend.lesson_figures import fig_channel_map
from views import common, lessons, url_state

MODES = {"zero": "Set them to zero", "mean": "Set them to their mean over other texts"}


def magnitudes(trace: Trace) -> None:
    layers = list(range(len(trace.layers["top1"])))
    series = {name: trace.layers[name].tolist() for name in ("top1", "top2", "top3", "median_abs")}
    title = "Largest |h| per layer against the median (h^0 = embeddings)"
    st.plotly_chart(figures.fig_lines(layers, series, title, "layer l of h^l", "|h| (log)", log_y=True), key="ma_top")
    if not trace.massive:
        st.info("No activation in this text passes the threshold (|h| > 100 and ≥ 1000 × the median).")
        return
    rows = [
        {"layer": layer, "token": f"{token}:{trace.tokens[token]}", "channel": channel, "value": round(value, 1)}
        for layer, token, channel, value in trace.massive
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, height=240, key="ma_list")


def channel_map(trace: Trace) -> None:
    n_states = len(trace.layers["top1"])
    st.session_state.setdefault("ma_layer", int(np.argmax(trace.layers["top1"])))
    common.clamp("ma_layer", n_states - 1)
    layer = st.slider("Layer of the token × channel map", 0, n_states - 1, key="ma_layer")
    st.plotly_chart(fig_channel_map(trace.residual[layer], list(trace.tokens)), key="ma_map")


def intervention(request: common.Request, trace: Trace) -> dict[str, interventions.Outcome]:
    """The form, and the comparison of every run so far; returns those runs."""
    st.subheader("Intervene: take the massive activations away")
    if not trace.massive:
        st.caption("Nothing flagged, so nothing to change in this text: try another example.")
        return {}
    first = min(layer for layer, *_ in trace.massive)
    with st.form("ma_form"):
        mode = st.radio("Replace the flagged cells", list(MODES), format_func=MODES.get, key="ma_mode")
        st.session_state.setdefault("ma_from", max(first, 1))
        start = st.slider("From the output of layer", 1, len(trace.layers["top1"]) - 1, key="ma_from")
        submitted = st.form_submit_button("Run the intervention")
    if submitted:
        loaded = common.get_model(request.model, request.dtype)
        run = lambda: interventions.set_massive(loaded, trace.massive, mode, start, request.add_bos)  # noqa: E731
        args = (interventions.massive_cells(trace.massive), mode, start, request.add_bos)
        change = lessons.attempt(lambda: lessons.cached(request, "massive", args, run, "Measuring other texts…"))
        if change is not None:
            lessons.remember(f"ma_{mode}", trace, change)
    outcomes = ran(request, trace)
    if len(outcomes) > 1:
        lessons.comparison(outcomes["intact"], [o for mode, o in outcomes.items() if mode != "intact"], "ma_compare")
        st.caption(
            "The mean is taken over six other texts (Python's help pages): for each flagged channel, its "
            "largest entry in each text and layer. The cells are held there at every layer output from the one chosen."
        )
    return outcomes


def ran(request: common.Request, trace: Trace) -> dict[str, interventions.Outcome]:
    """The intact run and every intervention of this page already run on this text."""
    changes = {mode: lessons.remembered(f"ma_{mode}", trace) for mode in MODES}
    changes = {mode: change for mode, change in changes.items() if change is not None}
    if not changes:
        return {}
    ids = trace.token_ids
    found = lessons.attempt(lambda: {mode: lessons.outcome(request, ids, c) for mode, c in changes.items()})
    intact = lessons.attempt(lambda: lessons.outcome(request, ids, None))
    return {} if found is None or intact is None else {"intact": intact, **found}


def perplexity_after(outcomes: dict[str, interventions.Outcome], mode: str) -> str:
    if mode not in outcomes:
        return "run the intervention above"
    return f"{np.exp(outcomes['intact'].loss):.2f} → {np.exp(outcomes[mode].loss):.2f}"


st.title("Massive activations")
st.markdown(
    "In a few channels, the first token's hidden state grows **thousands of times** larger than everything "
    "else, abruptly, in an early layer, and stays that way. Those channels are what makes the first token's "
    "key line up with every query. They behave like fixed biases: the value matters, not the text."
)
analysis = lessons.analysis()
if analysis is not None:
    request, trace = analysis.request, analysis.trace
    magnitudes(trace)
    channel_map(trace)
    outcomes = intervention(request, trace)
    peak = int(np.argmax(trace.layers["top1"]))
    lessons.paper_table(
        [
            ("largest |h|", "about 2,500 (LLaMA2-7B)", f"{trace.layers['top1'][peak]:.0f} at h^{peak}"),
            ("median |h| at that layer", "about 0.2", f"{trace.layers['median_abs'][peak]:.3f}"),
            (
                "where they appear",
                "abruptly at layer 2",
                f"first flagged at h^{min((m[0] for m in trace.massive), default='-')}",
            ),
            ("perplexity when set to zero", "to infinity", perplexity_after(outcomes, "zero")),
            ("perplexity when set to their mean", "5.47 → 5.47", perplexity_after(outcomes, "mean")),
        ],
        "Sun et al., Massive activations in large language models, 2024",
    )
url_state.sync_url()
