"""Lesson 4: sinks and diagonals are two ways to switch a head off; both keep tokens from blurring."""

import numpy as np
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import state
from sinkscope.core.metrics import nan_mean
from sinkscope.experiments import claims, interventions
from sinkscope.experiments.interventions import Outcome

from views.frame import Context
from views.state import session
from views.text import language, num, say, t
from views.widgets import charts, lessons, sink_cost
from views.widgets.html_maps import kind_counts

SOURCES = {"sink": "diag.heads_sink", "diagonal": "diag.heads_diagonal", "all": "diag.heads_all"}
TARGETS = {"diagonal": "diag.to_diagonal", "sink": "diag.to_sink", "uniform": "diag.to_uniform"}


def depth(trace: Trace) -> None:
    entropy = nan_mean(trace.heads["entropy"], axis=1)
    charts.show(plot.fig_smoothing_depth(trace.layers, entropy, lang=language()), "dg_depth")
    away = np.flatnonzero(trace.layers["bos_cosine"] <= 0)
    where = ", ".join(state(int(layer)) for layer in away) if away.size else t("diag.no_layer")
    st.caption(t("diag.depth_help", where=where))


def kinds(trace: Trace) -> None:
    left, right = st.columns(2)
    with left:
        kind_counts(trace.heads["kind"], key="dg_kinds")
    charts.show(
        plot.fig_kind_output(trace.heads["kind"], trace.heads["output_norm"], lang=language()), "dg_output", right
    )
    st.caption(t("diag.kinds_help"))


def force_form(trace: Trace) -> None:
    """Which heads, what pattern, which layers: each run joins the ones before on this text."""
    n_layers = trace.shape[0]
    with st.form("dg_form"):
        left, right = st.columns(2)
        source = left.radio(t("diag.which_heads"), list(SOURCES), format_func=lambda k: t(SOURCES[k]), key="dg_source")
        target = right.radio(t("diag.make_them"), list(TARGETS), format_func=lambda k: t(TARGETS[k]), key="dg_target")
        layers = lessons.layer_range("dg_layers", n_layers, (0, n_layers - 1))
        submitted = st.form_submit_button(t("lesson.run_intervention"))
    if not submitted:
        return
    heads = interventions.heads_of_kind(trace.heads["kind"], source, layers)
    heads = tuple((layer, head) for layer, head in heads if trace.heads["kind"][layer, head] != target)
    if not heads:
        st.warning(t("diag.none_found", heads=t(SOURCES[source]), low=layers[0], high=layers[-1]))
        return
    earlier = lessons.remembered("dg_changes", trace) or ()
    change = interventions.ForceHeads(heads, target)
    lessons.remember("dg_changes", trace, (*[c for c in earlier if c != change], change))


def intervention(request: session.Request, trace: Trace) -> list[tuple[interventions.Intervention, Outcome]]:
    """The form, the runs so far against the intact one, and the scaled token cosine of each across depth."""
    st.subheader(t("diag.intervene"))
    st.markdown(t("diag.intervene_help"))
    force_form(trace)
    changes = lessons.remembered("dg_changes", trace) or ()
    ids = trace.token_ids
    found = lessons.attempt(lambda: [lessons.outcome(request, ids, c) for c in (None, *changes)]) if changes else None
    if not found:
        return []
    runs = list(zip((None, *changes), found, strict=True))
    lessons.comparison(found[0], runs[1:], "dg_compare")
    said = swap_cost(runs)
    if said:
        st.markdown(said)
    series = {say(c.message) if c else t("lesson.intact"): o.token_cosine_scaled.tolist() for c, o in runs}
    depth_axis = list(range(len(found[0].token_cosine_scaled)))
    fig = plot.fig_lines(depth_axis, series, t("diag.cosine_title"), t("massive.layer_axis"), t("diag.cosine_axis"))
    charts.show(fig, "dg_cosine")
    return runs


def swap_cost(runs: list[tuple[interventions.Intervention | None, Outcome]]) -> str | None:
    """What turning heads into diagonals cost here, against making every head dense: the two ways to switch off
    are one for a head with nothing to do, not necessarily for the model that trained its heads."""
    intact = runs[0][1].loss
    to_diagonal = [(c, o.loss - intact) for c, o in runs if c is not None and c.to == "diagonal"]
    dense = [(c, o.loss - intact) for c, o in runs if c is not None and c.to == "uniform"]
    if not to_diagonal:
        return None
    change, cost = to_diagonal[-1]
    said = t("diag.swap_cost", heads=len(change.heads), nats=num(cost, "+.2f"))
    if dense and cost > dense[-1][1]:
        said += " " + t("diag.swap_worse", dense_heads=len(dense[-1][0].heads), dense=num(dense[-1][1], "+.2f"))
    return said


def smoothing(runs: list[tuple[interventions.Intervention | None, Outcome]]) -> str:
    """Mean scaled token cosine over depth, intact -> with every head made dense (the latest such run)."""
    dense = [o for c, o in runs if c is not None and c.to == "uniform"]
    if not dense:
        return t("diag.do_dense")
    before, after = float(np.nanmean(runs[0][1].token_cosine_scaled)), float(np.nanmean(dense[-1].token_cosine_scaled))
    return t("diag.dense_change", before=num(before), after=num(after))


def paper(trace: Trace, runs: list[tuple[interventions.Intervention | None, Outcome]], cost: dict) -> None:
    """Súkeník et al.'s claims beside this text's numbers and the cost sweep's slopes."""
    slopes = {name: num(value, ".2f") if value is not None else "—" for name, value in cost["slopes"].items()}
    kinds_found = t("diag.cost_slopes", sink=slopes["aligned/sink"], diagonal=slopes["aligned/diagonal"])
    lessons.paper_table(
        [
            (t("diag.paper_cos"), t("diag.paper_cos_value"), say(claims.half_space(trace))),  # as the scoreboard
            (t("diag.paper_cost"), t("diag.paper_cost_value"), kinds_found),
            (t("diag.paper_smooth"), t("diag.paper_smooth_value"), smoothing(runs) if runs else t("diag.do_dense")),
        ],
        t("diag.paper_source"),
    )


def show(request: session.Request, trace: Trace) -> None:
    depth(trace)
    kinds(trace)
    runs = intervention(request, trace)
    paper(trace, runs, sink_cost.section())


def page(context: Context) -> None:
    """Lesson 4: sinks and diagonals are two ways to switch a head off; both keep tokens from blurring."""
    lessons.lesson(context, ("diag.title", "diag.intro"), show)
