"""Lesson 4: where sinks are made: where attention goes besides the first token, the secondary sinks, the block that
builds the first token's sink, why a head looks at it, and a sink made elsewhere."""

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import states
from sinkscope.core.names import DEFAULT_EPS
from sinkscope.core.writes import PARTS
from sinkscope.experiments import elsewhere, qk, writes
from sinkscope.findings import origins

from views.frame import Context
from views.state import session
from views.text import language, local_table, num, percent, plain, say, t
from views.widgets import charts, head_picker, lessons
from views.widgets.key_map import key_map

TERMS = 8  # the QK terms drawn one by one; the rest are summed
MODE_KEYS = {"state": "origins.mode_state", "massive": "origins.mode_massive", "scale": "origins.mode_scale"}


def secondary(trace: Trace) -> None:
    st.subheader(t("origins.secondary_heading"))
    found = origins.secondary_sinks(trace)
    st.markdown(plain(say(found.said())))
    low, high = found.bounds
    st.caption(t("origins.bounds_note", shortest=origins.PAPER_SHORTEST, spare=origins.PAPER_SPARE,
                 depth=origins.PAPER_DEPTH, layers=trace.shape[0], low=round(low, 1), high=round(high, 1),
                 raised=origins.RAISED))  # fmt: skip
    if not found.sinks:
        return
    rows = [{t("origins.col_token"): f"{s.position}:{s.token}", t("origins.col_layers"): states([(s.first, s.last)]),
             t("origins.col_lifetime"): s.lifetime, "key_sink": s.key_sink, t("origins.col_mlp_norm"): s.mlp_norm,
             t("origins.col_mlp_cos"): s.mlp_cos, t("origins.col_within"): "✓" if s in found.within else ""}
            for s in found.sinks]  # fmt: skip
    st.dataframe(
        local_table(pd.DataFrame(rows), 2), hide_index=True, key="or_secondary", height=min(320, 40 + 35 * len(rows))
    )


def first_token(request: session.Request, trace: Trace) -> None:
    st.subheader(t("origins.writes_heading"))
    refused = request.loaded.refusal(Can.READ_WRITES)
    if refused is not None:  # the trace then has no writes
        st.info(say(refused))
        return
    built = lessons.attempt(lambda: writes.first_writes(trace))  # a bfloat16 analysis keeps no writes: said so
    if built is None:
        return
    left, right = st.columns(2)
    charts.show(plot.fig_first_writes(built.attn_write, built.mlp_write, lang=language()), "or_writes", left)
    if built.channel is not None:
        charts.show(plot.fig_channel_writes(built.in_channel, built.channel, lang=language()), "or_channel", right)
    st.markdown(say(origins.sink_phases(trace).said()))  # where the sink appears, then which write makes the activation
    st.markdown(say(built.said()))
    removal(request, trace, built)


def removal(request: session.Request, trace: Trace, built: writes.FirstWrites) -> None:
    """Remove one block's write at position 0 and compare the later sink rate and the loss with the intact run."""
    part, block = (built.builder.part, built.builder.block) if built.builder else ("mlp", 0)
    st.session_state.setdefault("or_block", block)
    st.session_state.setdefault("or_part", part)
    head_picker.clamp("or_block", trace.shape[0] - 1)
    with st.form("or_remove_form"):
        st.markdown(t("origins.remove_heading"))
        cells = st.columns(2)
        block = cells[0].slider(t("fig.block"), 0, trace.shape[0] - 1, key="or_block")
        part = cells[1].radio(t("origins.part"), PARTS, format_func=lambda p: t(plot.WRITE_KEYS[p]), key="or_part",
                              horizontal=True)  # fmt: skip
        asked = st.form_submit_button(t("origins.remove"))
    if asked:
        lessons.remember("or_removed", trace, writes.RemoveWrite(int(block), part))
    change = lessons.remembered("or_removed", trace)
    if change is None:
        return
    runs = lessons.attempt(lambda: [lessons.outcome(request, trace.token_ids, c) for c in (None, change)])
    if runs is None:
        return
    removed = writes.WriteRemoved(change, *runs, DEFAULT_EPS)
    cells = st.columns(3)
    intact = t("origins.intact_was", value=percent(removed.sink_after(removed.intact)))
    label = t("origins.sink_after", layer=change.block + 1, eps=num(DEFAULT_EPS, ".1f"))
    cells[0].metric(label, percent(removed.sink_after(removed.changed)), intact, delta_color="off")
    cells[1].metric(t("origins.loss"), num(removed.changed.loss, ".2f"), num(removed.loss_change, "+.2f"),
                    delta_color="inverse")  # fmt: skip
    cells[2].metric(t("origins.intact_loss"), num(removed.intact.loss, ".2f"))
    st.caption(say(change.message))
    controls(request, trace, removed, built.channel)


def controls(request: session.Request, trace: Trace, removed: writes.WriteRemoved, channel: int | None) -> None:
    """The same write zeroed, replaced by its mean over other first tokens, and zeroed in its massive channel only:
    side by side, so that "no sink" and "out of range" can be told apart."""
    block, part, loaded = removed.removed.block, removed.removed.part, request.loaded
    run = lambda: writes.controls(loaded, trace.token_ids, block, part, channel)  # noqa: E731
    found = lessons.attempt(lambda: lessons.cached(request, "write_controls", (trace.token_ids, block, part, channel),
                                                   run, t("origins.averaging")))  # fmt: skip
    runs = found and lessons.attempt(lambda: [lessons.outcome(request, trace.token_ids, c) for c in found])
    if not runs:
        return
    st.markdown(t("origins.controls_heading"))
    rows = []
    for change, run_without in zip(found, runs, strict=True):
        each = writes.WriteRemoved(change, removed.intact, run_without, DEFAULT_EPS)
        rows.append(
            {
                t("origins.col_how"): say(change.message),
                t("origins.col_sink_after"): each.sink_after(run_without),
                t("origins.loss"): run_without.loss,
                t("origins.col_loss_change"): each.loss_change,
            }
        )
    st.dataframe(local_table(pd.DataFrame(rows), 2), hide_index=True, key="or_controls")
    st.caption(t("origins.controls_note", layer=block + 1, eps=num(DEFAULT_EPS, ".1f"),
                 intact=percent(removed.sink_after(removed.intact))))  # fmt: skip


def why_this_head(request: session.Request, trace: Trace) -> None:
    st.subheader(t("origins.qk_heading"))
    sink = np.nan_to_num(trace.heads["sink"], nan=-1.0)
    strongest = np.unravel_index(np.argmax(sink), sink.shape)
    st.session_state.setdefault("or_layer", int(strongest[0]))
    st.session_state.setdefault("or_head", int(strongest[1]))
    head_picker.clamp("or_layer", trace.shape[0] - 1)
    head_picker.clamp("or_head", trace.shape[1] - 1)
    cells = st.columns(3)
    layer = cells[0].slider(t("common.layer"), 0, trace.shape[0] - 1, key="or_layer")
    head = cells[1].slider(t("common.head"), 0, trace.shape[1] - 1, key="or_head")
    last = trace.n_tokens - 1
    if last < 1:
        st.info(t("origins.two_tokens"))
        return
    first, last = cells[2].slider(t("origins.queries"), 1, last, (1, last), key="or_queries")
    loaded = request.loaded
    args = (trace.token_ids, layer, head, first, last)
    run = lambda: qk.qk_attribution(loaded, trace.token_ids, layer, head, (first, last))  # noqa: E731
    terms = lessons.attempt(lambda: lessons.cached(request, "qk", args, run, t("origins.attributing")))
    if terms is None:
        return
    largest = terms.largest(TERMS)
    rest = float(terms.terms.sum() - sum(value for _, value in largest))
    where = {"layer": layer, "head": head, "first": first, "last": last}
    charts.show(plot.fig_qk_terms(largest, rest, terms.score, where, lang=language()), "or_qk")
    st.caption(t("origins.qk_note", score=terms.score, total=float(terms.terms.sum())))
    st.caption(t("origins.margin_note", margin=terms.margin, score=terms.score, others=terms.others,
                 total=float(terms.margin_terms.sum())))  # fmt: skip
    split_check(request, trace, terms)


def split_check(request: session.Request, trace: Trace, terms: qk.QKTerms) -> None:
    """The split's prediction without the write that builds the massive activation, beside a real run without it
    (the intact split is the one drawn above, not computed again)."""
    layer, head, queries = terms.layer, terms.head, (terms.first, terms.last)
    builder = writes.first_writes(trace).builder if trace.writes is not None else None
    if builder is None or builder.block >= layer:
        st.caption(t("origins.no_earlier_write"))
        return
    removed, loaded = (builder.part, builder.block), request.loaded
    run = lambda: qk.linear_check(loaded, trace.token_ids, layer, head, removed, queries, terms)  # noqa: E731
    args = (trace.token_ids, layer, head, removed, queries)
    check = lessons.attempt(lambda: lessons.cached(request, "qk_check", args, run, t("origins.attributing")))
    if check is not None:
        st.markdown(say(check.said()))


def sink_elsewhere(request: session.Request, trace: Trace) -> None:
    st.subheader(t("origins.elsewhere_heading"))
    if trace.n_tokens < 2:
        st.info(t("origins.two_tokens"))
        return
    st.session_state.setdefault("or_position", trace.n_tokens // 2)
    st.session_state.setdefault("or_at", min((layer for layer, *_ in trace.massive), default=trace.shape[0] // 2))
    head_picker.clamp("or_at", trace.shape[0] - 1)
    head_picker.clamp("or_position", trace.n_tokens - 1)
    with st.form("or_elsewhere_form"):
        cells = st.columns(3)
        position = cells[0].slider(t("origins.position"), 1, trace.n_tokens - 1, key="or_position")
        layer = cells[1].slider(t("origins.at_state"), 0, trace.shape[0] - 1, key="or_at")
        mode = cells[2].radio(t("origins.mode"), elsewhere.MODES, format_func=lambda m: t(MODE_KEYS[m]),
                              key="or_mode")  # fmt: skip
        asked = st.form_submit_button(t("origins.make_sink"))
    if not asked:
        return
    loaded = request.loaded
    run = lambda: elsewhere.make_sink(loaded, trace, position, layer, mode)  # noqa: E731
    made = lessons.attempt(lambda: lessons.cached(request, "elsewhere", (trace.token_ids, position, layer, mode), run,
                                                  t("origins.making")))  # fmt: skip
    if made is None:
        return
    layers = list(range(trace.shape[0]))
    series = {t("origins.series_token", token=made.token, when=t("origins.intact")): made.before.tolist(),
              t("origins.series_token", token=made.token, when=t("origins.changed")): made.after.tolist(),
              t("origins.series_first", when=t("origins.intact")): made.first_before.tolist(),
              t("origins.series_first", when=t("origins.changed")): made.first_after.tolist()}  # fmt: skip
    fig = plot.fig_lines(layers, series, say(made.change.message), t("fig.layer"), "key_sink")
    charts.show(fig, "or_elsewhere")
    st.markdown(plain(say(made.said())))


def show(request: session.Request, trace: Trace) -> None:
    st.subheader(t("origins.where_heading"))
    key_map(trace, "or_key_map")
    secondary(trace)
    first_token(request, trace)
    why_this_head(request, trace)
    sink_elsewhere(request, trace)


def page(context: Context) -> None:
    """Lesson 4: where sinks are made."""
    lessons.lesson(context, ("origins.title", "origins.intro"), show)
