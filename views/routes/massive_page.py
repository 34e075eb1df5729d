"""Lesson 3: massive activations, a few huge channels of the first token that act as fixed biases."""

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.experiments import interventions
from sinkscope.findings import residual

from views.frame import Context
from views.state import session
from views.text import language, local_table, num, say, t
from views.widgets import charts, head_picker, lessons

MODES = {"zero": "massive.mode_zero", "mean": "massive.mode_mean"}


def magnitudes(trace: Trace) -> None:
    layers = list(range(len(trace.layers["top1"])))
    charts.show(plot.fig_magnitudes(trace.layers, lang=language()), "ma_top")
    if not trace.massive:
        st.info(t("massive.none", threshold=residual.threshold()))
        return
    found = residual.massive(trace.massive, trace.layers)
    st.caption(t("massive.first_here", first=found.layers[0], last=len(layers) - 1))
    st.markdown(say(residual.counted(found)))
    st.markdown(sinks_before(trace, found.layers[0]))
    rows = [
        {t("massive.col_layer"): layer, t("massive.col_token"): f"{token}:{trace.tokens[token]}",
         t("massive.col_channel"): channel, t("massive.col_value"): round(value, 1)}
        for layer, token, channel, value in trace.massive
    ]  # fmt: skip
    st.dataframe(local_table(pd.DataFrame(rows), 1), hide_index=True, height=240, key="ma_list")


def sinks_before(trace: Trace, first: int) -> str:
    """Whether the sink waits for the massive activations (``findings.residual.sink_before``): attention in layer l
    reads h^l, so layers 0 .. first-1 read only states without a flagged activation."""
    found = residual.sink_before(trace.heads, trace.layers, first)
    if found is None:
        return t("massive.from_the_start")
    return say(found.said())


def channel_map(trace: Trace) -> None:
    n_states = len(trace.layers["top1"])
    st.session_state.setdefault("ma_layer", int(np.argmax(trace.layers["top1"])))
    head_picker.clamp("ma_layer", n_states - 1)
    layer = st.slider(t("massive.map_layer"), 0, n_states - 1, key="ma_layer")
    charts.show(plot.fig_channel_map(trace.residual[layer], list(trace.tokens), lang=language()), "ma_map")


def intervention(request: session.Request, trace: Trace) -> dict[str, tuple]:
    """The form, and the comparison of every run so far; returns mode -> (intervention, outcome)."""
    st.subheader(t("massive.intervene"))
    if not trace.massive:
        st.caption(t("massive.nothing_flagged"))
        return {}
    first = min(layer for layer, *_ in trace.massive)
    with st.form("ma_form"):
        mode = st.radio(t("massive.replace"), list(MODES), format_func=lambda m: t(MODES[m]), key="ma_mode")
        st.session_state.setdefault("ma_from", max(first, 1))
        start = st.slider(t("massive.from_layer"), 1, len(trace.layers["top1"]) - 1, key="ma_from")
        submitted = st.form_submit_button(t("lesson.run_intervention"))
    if submitted:
        loaded = request.loaded
        run = lambda: interventions.set_massive(loaded, trace.massive, mode, start, request.add_bos)  # noqa: E731
        args = (interventions.massive_cells(trace.massive), mode, start, request.add_bos)
        change = lessons.attempt(lambda: lessons.cached(request, "massive", args, run, t("massive.measuring")))
        if change is not None:
            lessons.remember(f"ma_{mode}", trace, change)
    runs = ran(request, trace)
    if len(runs) > 1:
        lessons.comparison(runs["intact"][1], [run for mode, run in runs.items() if mode != "intact"], "ma_compare")
        st.caption(t("massive.mean_help"))
    return runs


def ran(request: session.Request, trace: Trace) -> dict[str, tuple]:
    """The intact run and every intervention of this page already run on this text, as (change, outcome)."""
    changes = {mode: lessons.remembered(f"ma_{mode}", trace) for mode in MODES}
    changes = {mode: change for mode, change in changes.items() if change is not None}
    if not changes:
        return {}
    ids = trace.token_ids
    found = lessons.attempt(lambda: {mode: (c, lessons.outcome(request, ids, c)) for mode, c in changes.items()})
    intact = lessons.attempt(lambda: lessons.outcome(request, ids, None))
    return {} if found is None or intact is None else {"intact": (None, intact), **found}


def perplexity_after(runs: dict[str, tuple], mode: str) -> str:
    return lessons.ppl_change(runs["intact"][1], runs[mode][1]) if mode in runs else t("massive.run_above")


def paper(trace: Trace, runs: dict[str, tuple]) -> None:
    """Sun et al.'s figures beside this text's."""
    peak = int(np.argmax(trace.layers["top1"]))
    first = min((m[0] for m in trace.massive), default=None)
    top = t("massive.at_layer", value=num(trace.layers["top1"][peak], ",.0f"), layer=peak)
    where = t("massive.first_flagged", layer=first) if first is not None else "—"
    mean_value = t("massive.paper_mean_value", before=num(5.47, ".2f"))
    lessons.paper_table(
        [
            (t("massive.paper_top"), t("massive.paper_top_value"), top),
            (t("massive.paper_median"), t("massive.paper_median_value"), num(trace.layers["median_abs"][peak])),
            (t("massive.paper_where"), t("massive.paper_where_value"), where),
            (t("massive.paper_zero"), t("massive.paper_zero_value"), perplexity_after(runs, "zero")),
            (t("massive.paper_mean"), mean_value, perplexity_after(runs, "mean")),
        ],
        t("massive.paper_source"),
    )


def show(request: session.Request, trace: Trace) -> None:
    magnitudes(trace)
    channel_map(trace)
    paper(trace, intervention(request, trace))


def page(context: Context) -> None:
    """Lesson 3: massive activations, a few huge channels of the first token that act as fixed biases."""
    lessons.lesson(context, ("massive.title", "massive.intro"), show)
