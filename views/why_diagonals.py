"""Lesson 4: sinks and diagonals are two ways to switch a head off; both keep tokens from blurring."""

import numpy as np
import streamlit as st

from backend import figures, interventions
from backend.capture import Trace
from backend.lesson_figures import fig_kind_output, fig_smoothing_depth
from backend.metrics import nan_mean
from views import common, lessons, url_state

DIRECTIONS = {"sink": "Sink heads → diagonal", "diagonal": "Diagonal heads → sink"}


def depth(trace: Trace) -> None:
    entropy = nan_mean(trace.heads["entropy"], axis=1)
    st.plotly_chart(fig_smoothing_depth(trace.layers, entropy), key="dg_depth")
    away = np.flatnonzero(trace.layers["bos_cosine"] <= 0)
    where = ", ".join(f"h^{layer}" for layer in away) if away.size else "no layer"
    st.caption(
        f"The first token's state points away from the others (bos_cosine ≤ 0) at {where}: there a sink is "
        "geometrically representable. Standardized cosines remove the massive channels, which dominate raw ones."
    )


def kinds(trace: Trace) -> None:
    left, right = st.columns(2)
    left.plotly_chart(figures.fig_kind_counts(trace.heads["kind"]), key="dg_kinds")
    right.plotly_chart(fig_kind_output(trace.heads["kind"], trace.heads["output_norm"]), key="dg_output")
    st.caption(
        "Both patterns switch a head off: a sink head's output is near zero (it reads a tiny value), a "
        "diagonal head's output is the token's own value, which changes little when added back."
    )


def intervention(request: common.Request, trace: Trace) -> list[interventions.Outcome]:
    st.subheader("Intervene: turn one kind of head into the other")
    n_layers = trace.shape[0]
    with st.form("dg_form"):
        source = st.radio("Change", list(DIRECTIONS), format_func=DIRECTIONS.get, key="dg_source", horizontal=True)
        layers = lessons.layer_range("dg_layers", n_layers, (0, n_layers - 1))
        submitted = st.form_submit_button("Run the intervention")
    if submitted:
        heads = interventions.heads_of_kind(trace.heads["kind"], source, layers)
        if not heads:
            st.warning(f"No {source} heads in layers {layers[0]}–{layers[-1]}: widen the range or pick the other kind.")
        else:
            target = "diagonal" if source == "sink" else "sink"
            lessons.remember("dg_change", trace, interventions.ForceHeads(heads, target))
    change = lessons.remembered("dg_change", trace)
    if change is None:
        return []
    ids = trace.token_ids
    found = lessons.attempt(lambda: [lessons.outcome(request, ids, None), lessons.outcome(request, ids, change)])
    if found is None:
        return []
    lessons.comparison(found[0], found[1:], "dg_compare")
    series = {o.label: o.token_cosine.tolist() for o in found}
    layers_axis = list(range(len(found[0].token_cosine)))
    title = "Token cosine per layer: do the tokens blur together?"
    st.plotly_chart(figures.fig_lines(layers_axis, series, title, "layer l of h^l", "token cosine"), key="dg_cosine")
    return found


st.title("Sinks vs diagonals, and oversmoothing")
st.markdown(
    "A head with nothing to do can switch itself off in two ways: send every query to the **first token** "
    "(a sink: the output is almost exactly zero) or to **itself** (a diagonal: each token gets its own value "
    "back). Both stop the head from averaging tokens together, which would make their states ever more alike "
    "(**oversmoothing**). Trained models prefer sinks: they are cheaper to represent."
)
analysis = lessons.analysis()
if analysis is not None:
    request, trace = analysis.request, analysis.trace
    depth(trace)
    kinds(trace)
    found = intervention(request, trace)
    counts = {kind: int((trace.heads["kind"] == kind).sum()) for kind in ("sink", "diagonal")}
    loss = f"{found[0].loss:.3f} → {found[1].loss:.3f} nats/token" if found else "run the intervention above"
    lessons.paper_table(
        [
            (
                "bos_cosine in middle layers",
                "≤ 0 (GPT-2, Llama 3.1, Gemma, Mistral)",
                f"{np.median(trace.layers['bos_cosine']):.2f} (median over layers)",
            ),
            (
                "parameter norm to represent it",
                "sink ~ T, diagonal ~ T^1.5",
                f"{counts['sink']} sink heads, {counts['diagonal']} diagonal",
            ),
            ("sparse patterns curb oversmoothing", "denser attention raises token cosine", loss),
        ],
        "Sukenik, Lopez Amado, Lampert, Mondelli 2026",
    )
url_state.sync_url()
