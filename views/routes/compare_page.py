"""Compare: two runs side by side (with and without BOS, prose and code, two models) on one colour scale."""

from __future__ import annotations

import numpy as np
import streamlit as st
from sinkscope import plot
from sinkscope.core.bundled import BUNDLED, DEFAULT_MODEL
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import Text
from sinkscope.core.metrics import nan_mean, sink_rate
from sinkscope.core.names import DEFAULT_EPS, HEAD_METRICS
from sinkscope.plot.census_figures import fig_diff_map

from views import frame
from views.frame import Context
from views.state import cache, session, url_state
from views.state.session import KEEP
from views.text import language, num, t
from views.widgets import charts, controls
from views.widgets.html_maps import head_map, kind_counts
from views.widgets.sliders import EPS_STEPS, decimal_slider

SIDES = ("a_", "b_")
MIN_PREFIX = 8  # the shortest prefix whose sink rate the length curve shows
PRESETS = {  # side -> (model, example, BOS); None: the model's own default
    "bos": ((DEFAULT_MODEL, "english", True), (DEFAULT_MODEL, "english", False)),
    "code": ((DEFAULT_MODEL, "english", None), (DEFAULT_MODEL, "python", None)),
    "repeated": ((DEFAULT_MODEL, "english", None), (DEFAULT_MODEL, "repeated", None)),
    "models": ((DEFAULT_MODEL, "english", None), ("gemma3-270m", "english", None)),
}

PRESET_TITLES = {"bos": "compare.preset_bos", "code": "compare.preset_code", "repeated": "compare.preset_repeated",
                 "models": "compare.preset_models"}  # fmt: skip


def presets() -> list[str]:
    """The presets this server can run: two models only when Gemma is installed and allowed."""
    config = cache.shared().settings
    runnable = lambda key: all(BUNDLED[m].installed() and config.allows(m) for m, _, _ in PRESETS[key])  # noqa: E731
    return [key for key in PRESETS if runnable(key)]


def apply_preset() -> None:
    state = st.session_state
    for prefix, (model, example, add_bos) in zip(SIDES, PRESETS[state["compare_preset"]], strict=True):
        state[prefix + "model_choice"], state[prefix + "example"] = model, example
        state.pop(prefix + "loaded_example", None)  # the example refills its text box
        if add_bos is None:
            state.pop(prefix + "add_bos", None)  # the model's own default
        else:
            state[prefix + "add_bos"] = add_bos


def restore_sides() -> None:
    """On a first visit, the sides the URL describes, else the first preset."""
    state, params = st.session_state, st.query_params
    if state.get("compare_restored"):
        return
    state["compare_restored"] = True
    if not any(key.startswith(SIDES) for key in params):
        state.setdefault("compare_preset", presets()[0])
        apply_preset()
        return
    for prefix in SIDES:
        url_state.restore_side(prefix, params, cache.shared().settings, session.EXAMPLES)


def side(prefix: str, column: st.delta_generator.DeltaGenerator) -> session.Analysis | None:
    with column:
        st.subheader(t("compare.side", side=prefix[0].upper()))
        with st.expander(t("compare.settings")):  # closed: the comparison, not the controls, fills the screen
            request = controls.request_controls(prefix)
        example = st.session_state.get(prefix + "example")
        titles = {key: t(value["title"]) for key, value in session.EXAMPLES.items()}
        st.caption(t("compare.summary", model=request.model if request else "-",
                     text=titles.get(example, t("side.own_text")),
                     bos=t("compare.with_bos" if request and request.add_bos else "compare.without_bos")))  # fmt: skip
        return frame.analysis_of(request, prefix) if request is not None else None


def label(prefix: str, analysis: session.Analysis) -> str:
    """What a legend calls a side, such as "A: smollm2-135m, 58 tokens"."""
    return t("compare.legend", side=prefix[0].upper(), model=analysis.request.model, n=analysis.trace.n_tokens)


def rates(a: Trace, b: Trace, eps: float) -> None:
    cells = st.columns(2)
    for cell, (prefix, trace) in zip(cells, zip(SIDES, (a, b), strict=True), strict=True):
        heading = t("compare.rate", side=prefix[0].upper(), eps=num(eps, ".2f"), n=trace.n_tokens)
        cell.metric(heading, t("compare.percent", rate=num(trace.sink_rate(eps), ".1f")))  # half width: short


def head_maps(a: Trace, b: Trace) -> None:
    metric = st.radio(t("explorer.colour_by"), HEAD_METRICS, horizontal=True, key="compare_metric", persist_state=KEEP,
                      format_func=Text(language()).metric)  # fmt: skip
    left, right = st.columns(2)
    for column, prefix, trace in ((left, "a_", a), (right, "b_", b)):
        column.caption(t("compare.map_of", side=prefix[0].upper()))
        with column:
            head_map(trace.heads, metric, key=prefix + "head_map")
    if a.shape == b.shape:
        charts.show(fig_diff_map(a.heads[metric], b.heads[metric], metric, lang=language()), "diff_map")
    else:
        st.info(t("compare.no_diff", a=f"{a.shape[0]} x {a.shape[1]}", b=f"{b.shape[0]} x {b.shape[1]}"))


def profiles(sides: dict[str, session.Analysis]) -> None:
    """Depth profiles overlaid (on relative depth when the layer counts differ), and head kinds per layer."""
    depths = {prefix: analysis.trace.shape[0] for prefix, analysis in sides.items()}
    relative = len(set(depths.values())) > 1
    x, series = {}, {}
    for prefix, analysis in sides.items():
        layers = np.arange(depths[prefix])
        x[label(prefix, analysis)] = (layers / max(depths[prefix] - 1, 1) if relative else layers).tolist()
        series[label(prefix, analysis)] = nan_mean(analysis.trace.heads["sink"], 1).tolist()
    x_title = t("compare.relative_depth" if relative else "fig.layer")
    fig = plot.fig_lines(x, series, t("compare.depth_title"), x_title, t("metric.sink"))
    charts.show(fig, "compare_depth")
    for column, (prefix, analysis) in zip(st.columns(2), sides.items(), strict=True):
        column.caption(t("compare.kinds_of", side=prefix[0].upper()))
        with column:
            kind_counts(analysis.trace.heads["kind"], key=prefix + "kinds")


def prefix_lengths(n_tokens: int) -> np.ndarray:
    """About 48 prefix lengths from MIN_PREFIX to the whole text, evenly spaced on a log axis."""
    return np.unique(np.geomspace(MIN_PREFIX, n_tokens, 48).round().astype(int))


def rate_curves(sides: dict[str, session.Analysis], eps: float) -> None:
    by_length_x, by_length, by_eps = {}, {}, {}
    eps_grid = np.round(np.arange(0.05, 0.951, 0.05), 2)
    for prefix, analysis in sides.items():
        trace, name = analysis.trace, label(prefix, analysis)
        by_eps[name] = [sink_rate(trace.heads["sink"], e) for e in eps_grid]
        if trace.n_tokens >= MIN_PREFIX:
            lengths = prefix_lengths(trace.n_tokens)
            by_length_x[name] = lengths.tolist()
            by_length[name] = [sink_rate(s, eps) for s in trace.sink_by_length(lengths)]
    left, right = st.columns(2)
    title = t("compare.by_length_title", eps=num(eps, ".2f"))
    y_title = t("fig.sink_rate_percent")
    if by_length:
        fig = plot.fig_lines(by_length_x, by_length, title, t("compare.prefix_tokens"), y_title, log_x=True)
        charts.show(fig, "compare_by_length", left)
        left.caption(t("compare.by_length_help", n=MIN_PREFIX))
    else:
        left.info(t("compare.too_short", n=MIN_PREFIX))
    fig = plot.fig_lines(eps_grid.tolist(), by_eps, t("compare.by_eps_title"), "eps", y_title)
    charts.show(fig, "compare_by_eps", right)


def page(_context: Context) -> None:  # the sidebar's text is not read here
    """Compare: two runs side by side (with and without BOS, prose and code, two models) on one colour scale."""
    st.title(t("compare.title"))
    st.caption(t("compare.intro"))
    restore_sides()
    options = presets()
    preset_label = {key: t(PRESET_TITLES[key]) for key in options}
    st.selectbox(t("compare.preset"), options, format_func=preset_label.get, key="compare_preset",
                 on_change=apply_preset, persist_state=KEEP)  # fmt: skip
    found = {prefix: side(prefix, column) for prefix, column in zip(SIDES, st.columns(2), strict=True)}
    url_state.sync_sides(SIDES)
    if not all(found.values()):
        return
    sides = dict(found)
    st.session_state.setdefault("compare_eps", DEFAULT_EPS)
    eps = decimal_slider(st, t("explorer.eps"), EPS_STEPS, DEFAULT_EPS, "compare_eps")
    a, b = sides["a_"].trace, sides["b_"].trace
    rates(a, b, eps)
    rate_curves(sides, eps)
    head_maps(a, b)
    profiles(sides)
