"""Lesson 5: break the sink, by removing it, by replacing the first token, or by nudging it."""

import math

import numpy as np
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.experiments import head_effects, interventions, sink_heads

from views.frame import Context
from views.state import cache, session
from views.text import language, num, say, t, times
from views.widgets import charts, head_picker, jobs, lessons
from views.widgets.sliders import decimal_slider, steps

REPLACEMENTS = {
    "\n": "break.newline",
    " ": "break.space",
    ".": "break.full_stop",
    "random": "break.random_word",
    "own": "break.your_own",
}


def drop_first(trace: Trace) -> interventions.Intervention | None:
    n_layers = trace.shape[0]
    with st.form("br_drop_form"):
        st.markdown(t("break.drop_heading"))
        k = st.number_input("k", 1, 8, 1, key="br_k")
        default = interventions.default_drop(n_layers).layers
        layers = lessons.layer_range("br_layers", n_layers, (default[0], default[-1]))
        if st.form_submit_button(t("break.drop")):
            lessons.remember("br_drop", trace, interventions.DropFirst(int(k), layers))
    return lessons.remembered("br_drop", trace)


def _random_word(request: session.Request) -> str:
    loaded = request.loaded
    seed = st.session_state["br_seed"] = st.session_state.get("br_seed", -1) + 1  # a new word every time
    return interventions.random_word(loaded.tokenizer, seed)


def replace_first(request: session.Request, trace: Trace) -> interventions.Intervention | None:
    with st.form("br_replace_form"):
        st.markdown(t("break.replace_heading", token=trace.tokens[0]))
        label = lambda choice: t(REPLACEMENTS[choice])  # noqa: E731
        choice = st.radio(t("break.replacement"), list(REPLACEMENTS), format_func=label, key="br_choice",
                          horizontal=True)  # fmt: skip
        own = st.text_input(t("break.own_token"), key="br_own")
        if st.form_submit_button(t("break.replace")):
            text = own if choice == "own" else _random_word(request) if choice == "random" else choice
            loaded = request.loaded
            change = lessons.attempt(lambda: interventions.single_token(loaded, text))
            if change is not None:
                lessons.remember("br_replace", trace, change)
    return lessons.remembered("br_replace", trace)


def sensitivity_form(trace: Trace) -> tuple[int, float] | None:
    """The perturbation asked for on this text: (other position, size), or None."""
    with st.form("br_sens_form"):
        st.session_state.setdefault("br_position", trace.n_tokens // 2)
        head_picker.clamp("br_position", trace.n_tokens - 1)
        position = st.slider(t("break.other_token"), 1, trace.n_tokens - 1, key="br_position")
        size = decimal_slider(st, t("break.distance"), steps(0.25, 4.0, 0.25), 1.0, "br_size")
        if st.form_submit_button(t("break.perturb")):
            st.session_state["br_sens"] = (trace.token_ids, position, size)
    asked = st.session_state.get("br_sens")
    return None if asked is None or asked[0] != trace.token_ids else asked[1:]


def sensitivity(request: session.Request, trace: Trace) -> dict[int, float] | None:
    """The form and the KL of each perturbation, which it returns once run."""
    st.subheader(t("break.sensitivity_title"))
    st.markdown(t("break.sensitivity_intro"))
    if trace.n_tokens < 3:
        st.info(t("break.three_tokens"))
        return None
    asked = sensitivity_form(trace)
    if asked is None:
        return None
    position, size = asked
    kl = lessons.attempt(lambda: lessons.sensitivity(request, trace.token_ids, position, size))
    if kl is not None:
        cells = st.columns(3)
        cells[0].metric(t("break.kl_first", token=trace.tokens[0]), num(kl[0], ".4f"))
        cells[1].metric(t("break.kl_other", position=position, token=trace.tokens[position]), num(kl[position], ".4f"))
        cells[2].metric(t("break.ratio"), ratio_text(kl))
        st.caption(t("break.kl_help", position=position))
        spread = lessons.attempt(lambda: lessons.sensitivity_spread(request, trace.token_ids, size))
        if spread is not None:  # one direction at one position can lie far from the rest: the scoreboard's spread
            st.markdown(say(spread.place(kl_ratio(kl))))
    return kl


def kl_ratio(kl: dict[int, float]) -> float:
    """How much more the predictions move when the first token is nudged than when the other one is."""
    first, other = kl.values()
    return first / other if other > 0 else math.inf


def ratio_text(kl: dict[int, float]) -> str:
    return times(kl_ratio(kl))


def paper(found: dict[type, str], kl: dict[int, float] | None) -> None:
    lessons.paper_table(
        [
            (t("break.paper_evict"), t("break.paper_evict_value"),
             found.get(interventions.DropFirst, t("break.do_drop"))),
            (t("break.paper_newlines"), t("break.paper_newlines_value"),
             found.get(interventions.ReplaceFirst, t("break.do_replace"))),
            (t("break.paper_sensitivity"), t("break.paper_sensitivity_value"),
             t("break.more_change", ratio=ratio_text(kl)) if kl else t("break.do_perturb")),
        ],
        t("break.paper_source"),
    )  # fmt: skip


def measure_sink_heads(request: session.Request, ids: tuple[int, ...]) -> None:
    """Every head's estimate, then the top heads exact, as the one job helper runs it; a Stop keeps what was measured
    exactly, the rest estimated."""
    loaded = request.loaded

    def run(show: cache.Show) -> sink_heads.SinkHeads:
        show, pause = jobs.pausing(show)  # other visitors get the model between the blocks of a unit

        def layer_done(cells: head_effects.Cells) -> bool:
            found = sink_heads.SinkHeads(cells)
            st.session_state["br_heads"] = (ids, found)
            done = int((~found.estimated & ~np.isnan(found.change)).sum())
            show(done / sink_heads.TOP, t("break.sink_heads_progress", done=done, total=sink_heads.TOP))
            return True

        show(0.0, t("kv.heads_estimating"))
        return sink_heads.sink_heads(loaded, list(ids), progress=layer_done, pause=pause)

    job = cache.Job(request.model, ("sink_heads", request.dtype, ids), run)
    found = lessons.attempt(
        lambda: jobs.run(job, t("break.sink_heads_running"), stop=("br_heads_stop", "kv.stop_help"))
    )
    if found is not None:
        st.session_state["br_heads"] = (ids, found)


def sink_heads_map(request: session.Request, trace: Trace) -> None:
    """Which heads' sinks matter: the per-head map of removing the first key, beside the same text's sink scores."""
    st.subheader(t("break.sink_heads_heading"))
    st.markdown(t("break.sink_heads_intro", top=sink_heads.TOP))
    refused = sink_heads.refusal(request.loaded, trace.n_tokens)
    if st.button(t("break.sink_heads_run"), key="br_heads_run", disabled=refused is not None):
        measure_sink_heads(request, trace.token_ids)
    if refused is not None:
        st.caption(say(refused.message))
    kept = st.session_state.get("br_heads")
    if kept is None or kept[0] != trace.token_ids:
        return
    found = kept[1]
    left, right = st.columns(2)
    charts.show(plot.fig_sink_heads(found.change, found.estimated, lang=language()), "br_sink_heads", left)
    charts.show(plot.fig_head_map(trace.heads, "sink", lang=language()), "br_sink_kinds", right)
    st.markdown(say(sink_heads.said(found)))


def show(request: session.Request, trace: Trace) -> None:
    left, right = st.columns(2)
    with left:
        dropped = drop_first(trace)
    with right:
        replaced = replace_first(request, trace)
    changes = [c for c in (dropped, replaced) if c is not None]
    found = {}
    if changes:
        ids = trace.token_ids
        runs = lessons.attempt(lambda: [lessons.outcome(request, ids, c) for c in [None, *changes]])
        if runs is not None:
            lessons.comparison(runs[0], list(zip(changes, runs[1:], strict=True)), "br_compare")
            found = {type(c): lessons.ppl_change(runs[0], o) for c, o in zip(changes, runs[1:], strict=True)}
    paper(found, sensitivity(request, trace))
    sink_heads_map(request, trace)


def page(context: Context) -> None:
    """Lesson 5: break the sink, by removing it, by replacing the first token, or by nudging it."""
    lessons.lesson(context, ("break.title", "break.intro"), show)
