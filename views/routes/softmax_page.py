"""Lesson 1: softmax must spend one unit of attention, so spare attention has to land somewhere."""

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core import metrics
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import MINUS
from sinkscope.core.tokens import token_labels
from sinkscope.findings import sources

from views.frame import Context
from views.state import navigation, session
from views.text import language, local_table, num, percent, t
from views.widgets import charts, head_picker, jobs, lessons
from views.widgets.html_maps import head_map
from views.widgets.sliders import decimal_slider, steps

PRESETS = {
    "nothing": (0.2, -0.1, 0.1, 0.0, -0.2, 0.1),
    "one": (0.0, 0.1, 6.0, -0.1, 0.0, 0.2),
    "two": (0.0, 4.0, 0.1, 0.0, 4.0, -0.1),
}
PRESET_KEYS = {
    "nothing": "softmax.preset_nothing", "one": "softmax.preset_one", "two": "softmax.preset_two",
    "own": "softmax.preset_own",
}  # fmt: skip
MAX_KEYS = 16
MAX_SCORE = 50  # scores past this only saturate the softmax: refused, so the bars stay readable


def preset_text(name: str) -> str:
    """A preset as the language writes a list of numbers: '0.2, -0.1' or '0,2; -0,1'."""
    separator = ", " if num(0.5, ".1f") == "0.5" else "; "
    return separator.join(num(value, ".1f") for value in PRESETS[name])


def _load_preset() -> None:
    if st.session_state["sm_preset"] in PRESETS:  # "own" keeps what the user typed
        st.session_state["sm_scores"] = preset_text(st.session_state["sm_preset"])


def _match_preset() -> None:
    """Typed scores that are no preset's make the radio say "your own scores"."""
    try:
        typed = tuple(parse_scores(st.session_state["sm_scores"]))
    except ValueError:
        typed = ()
    st.session_state["sm_preset"] = next((name for name, row in PRESETS.items() if row == typed), "own")


def parse_scores(text: str) -> np.ndarray:
    """'1, 2.5, -3' or '1; 2,5; −3' -> array; ValueError with a message a person can act on."""
    text = text.replace(MINUS, "-")  # the minus sign the presets are written with, or one pasted from a page
    if ";" in text:
        text = text.replace(",", ".").replace(";", ",")  # semicolons separate: commas are decimal points
    parts = [p for p in text.split(",") if p.strip()]
    if not 1 <= len(parts) <= MAX_KEYS:
        raise ValueError(t("softmax.count_error", n=MAX_KEYS))
    try:
        values = np.array([float(p) for p in parts])
    except ValueError:
        raise ValueError(t("softmax.number_error")) from None
    if not np.isfinite(values).all() or np.abs(values).max() > MAX_SCORE:
        raise ValueError(t("softmax.range_error", limit=MAX_SCORE))
    return values


def toy_row() -> None:
    st.session_state.setdefault("sm_preset", "nothing")
    st.session_state.setdefault("sm_scores", preset_text("nothing"))
    preset_label = lambda name: t(PRESET_KEYS[name])  # noqa: E731
    st.radio(t("softmax.preset"), list(PRESET_KEYS), format_func=preset_label, key="sm_preset", horizontal=True,
             on_change=_load_preset)  # fmt: skip
    text = st.text_input(t("softmax.scores"), key="sm_scores", on_change=_match_preset)
    try:
        scores = parse_scores(text)
    except ValueError as err:
        st.error(str(err))
        return
    controls = st.columns(2)
    sink_logit = decimal_slider(
        controls[0], t("softmax.sink_logit"), steps(-5.0, 10.0, 0.5), 2.0, "sm_sink_logit", ".1f"
    )
    bias = decimal_slider(controls[1], t("softmax.bias"), steps(-8.0, 4.0, 0.1), -1.8, "sm_bias", ".1f")
    weights = {
        "softmax": metrics.softmax(scores),
        "softmax+1": metrics.softmax_plus_one(scores),
        t("softmax.sink_logit_bars", s=num(sink_logit, "g")): metrics.sink_logit_softmax(scores, sink_logit),
        t("softmax.sigmoid_bars", b=num(bias, "g")): metrics.sigmoid_attention(scores, bias),
    }
    labels = [f"k{j}" for j in range(len(scores))]
    charts.show(plot.fig_softmax_variants(labels, weights, lang=language()), "sm_bars", on=sources.typed_scores())
    spent = [float(w.sum()) for w in weights.values()]  # softmax, softmax+1, sink logit, sigmoid
    st.caption(t("softmax.bars_now", top=num(float(weights["softmax"].max())), plus_one=num(1 - spent[1]),
                 sink=num(1 - spent[2]), sigmoid=num(spent[3])))  # fmt: skip
    numeric_check(scores)


def numeric_check(scores: np.ndarray) -> None:
    """softmax+1(x) == softmax([0, x]) without its first entry: a silent key with logit 0 and value 0."""
    plus_one = metrics.softmax_plus_one(scores)
    extended = metrics.softmax(np.concatenate([[0.0], scores]))
    columns = {"softmax+1(x)": plus_one, "softmax([0, x])[1:]": extended[1:]}
    table = pd.DataFrame(columns, index=[f"k{j}" for j in range(len(scores))])
    st.markdown(t("softmax.check"))
    st.dataframe(local_table(table.T), key="sm_check")
    difference, extra = np.abs(plus_one - extended[1:]).max(), extended[0]
    withheld = metrics.withheld_mass(plus_one)
    st.caption(t("softmax.check_result", difference=num(difference, ".1e"), extra=num(extra, ".4f"),
                 withheld=num(withheld, ".4f")))  # fmt: skip


def on_the_model(request: session.Request, trace: Trace) -> None:
    layer, head = head_picker.pick_head(trace)
    maps = jobs.layer_maps(request, trace, layer)
    labels = token_labels(trace.tokens)
    series = {
        t("softmax.withheld_line"): maps.withheld[head].tolist(),
        t("softmax.first_line"): maps.weights[head][:, 0].tolist(),
    }
    if trace.learned_sinks:
        series[t("softmax.learned_line")] = maps.learned[head].tolist()
    title = t("softmax.withheld_title", layer=layer, head=head)
    fig = plot.fig_lines(labels, series, title, t("softmax.query_token"), t("softmax.share"))
    charts.show(fig, "sm_withheld")
    head_map(trace.heads, "withheld", key="sm_withheld_map")
    st.caption(t("softmax.counterfactual"))
    if trace.learned_sinks:
        learned_sink(trace)


def learned_sink(trace: Trace) -> None:
    """This model has the toy row's sink logit for real (gpt-oss): what each head's logit absorbs."""
    learned = trace.heads["learned_sink"]
    layer, head = np.unravel_index(int(np.nanargmax(learned)), learned.shape)
    st.info(t("softmax.learned_here", mean=num(float(np.nanmean(learned))), top=num(float(learned[layer, head])),
              layer=int(layer), head=int(head)))  # fmt: skip
    head_map(trace.heads, "learned_sink", key="sm_learned_map")
    st.page_link(navigation.page_at("explorer"), label=t("softmax.learned_link"), icon=":material/visibility:")


def paper(trace: Trace) -> None:
    rate = num(trace.sink_rate(), ".1f")
    lessons.paper_table(
        [
            (t("softmax.paper_softmax"), percent(34.89, ".2f"), t("softmax.yours_rate", rate=rate, n=trace.n_tokens)),
            (t("softmax.paper_plus_one"), percent(16.36, ".2f"), t("softmax.trained_softmax")),
            (t("softmax.paper_sink_logit"), percent(8.78, ".2f"), t("softmax.trained_softmax")),
            (t("softmax.paper_softpick"), percent(0.0, ".2f"), t("softmax.trained_softmax")),
            (t("softmax.paper_withheld"), t("softmax.not_reported"), num(metrics.nan_mean(trace.heads["withheld"]))),
        ],
        t("softmax.paper_source"),
    )


def show(request: session.Request, trace: Trace) -> None:
    st.subheader(t("lesson.on_your_model"))
    on_the_model(request, trace)
    paper(trace)


def page(context: Context) -> None:
    """Lesson 1: softmax must spend one unit of attention, so spare attention has to land somewhere."""
    lessons.lesson(context, ("softmax.title", "softmax.intro"), show, before=toy_row)
