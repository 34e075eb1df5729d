"""Lesson 4: sinks and diagonals are two ways to switch a head off; both keep tokens from blurring."""

import numpy as np
import streamlit as st
from sinkscope import interventions, plot
from sinkscope.capture import Trace
from sinkscope.metrics import nan_mean

from views import common, lessons
from views.text import language, num, say, t

DIRECTIONS = {"sink": "diag.sink_to_diagonal", "diagonal": "diag.diagonal_to_sink"}
NONE_FOUND = {"sink": "diag.none_sink", "diagonal": "diag.none_diagonal"}


def depth(trace: Trace) -> None:
    entropy = nan_mean(trace.heads["entropy"], axis=1)
    st.plotly_chart(plot.fig_smoothing_depth(trace.layers, entropy, lang=language()), key="dg_depth")
    away = np.flatnonzero(trace.layers["bos_cosine"] <= 0)
    where = ", ".join(f"h^{layer}" for layer in away) if away.size else t("diag.no_layer")
    st.caption(t("diag.depth_help", where=where))


def kinds(trace: Trace) -> None:
    left, right = st.columns(2)
    left.plotly_chart(plot.fig_kind_counts(trace.heads["kind"], lang=language()), key="dg_kinds")
    right.plotly_chart(
        plot.fig_kind_output(trace.heads["kind"], trace.heads["output_norm"], lang=language()), key="dg_output"
    )
    st.caption(t("diag.kinds_help"))


def intervention(request: common.Request, trace: Trace) -> list[interventions.Outcome]:
    st.subheader(t("diag.intervene"))
    n_layers = trace.shape[0]
    with st.form("dg_form"):
        label = lambda kind: t(DIRECTIONS[kind])  # noqa: E731
        source = st.radio(t("diag.change"), list(DIRECTIONS), format_func=label, key="dg_source", horizontal=True)
        layers = lessons.layer_range("dg_layers", n_layers, (0, n_layers - 1))
        submitted = st.form_submit_button(t("lesson.run_intervention"))
    if submitted:
        heads = interventions.heads_of_kind(trace.heads["kind"], source, layers)
        if not heads:
            st.warning(t(NONE_FOUND[source], low=layers[0], high=layers[-1]))
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
    lessons.comparison(found[0], [(change, found[1])], "dg_compare")
    series = {t("lesson.intact"): found[0].token_cosine.tolist(), say(change.message): found[1].token_cosine.tolist()}
    layers_axis = list(range(len(found[0].token_cosine)))
    fig = plot.fig_lines(layers_axis, series, t("diag.cosine_title"), t("massive.layer_axis"), t("diag.cosine_axis"))
    st.plotly_chart(fig, key="dg_cosine")
    return found


def paper(trace: Trace, found: list[interventions.Outcome]) -> None:
    """Sukenik et al.'s claims beside this text's numbers."""
    counts = {kind: int((trace.heads["kind"] == kind).sum()) for kind in ("sink", "diagonal")}
    before_after = {"before": num(found[0].loss), "after": num(found[1].loss)} if found else {}
    loss = t("diag.loss_change", **before_after) if found else t("massive.run_above")
    median_cos = num(np.median(trace.layers["bos_cosine"]), ".2f")
    kinds_found = t("diag.counts", sinks=counts["sink"], diagonals=counts["diagonal"])
    lessons.paper_table(
        [
            (t("diag.paper_cos"), t("diag.paper_cos_value"), t("reads.median_layers", ratio=median_cos)),
            (t("diag.paper_cost"), t("diag.paper_cost_value"), kinds_found),
            (t("diag.paper_smooth"), t("diag.paper_smooth_value"), loss),
        ],
        t("diag.paper_source"),
    )


def show(request: common.Request, trace: Trace) -> None:
    depth(trace)
    kinds(trace)
    paper(trace, intervention(request, trace))


def page() -> None:
    """Lesson 4: sinks and diagonals are two ways to switch a head off; both keep tokens from blurring."""
    lessons.lesson(("diag.title", "diag.intro"), show)


if __name__ == "__main__":  # Streamlit runs a page file as __main__; importing it runs nothing
    page()
