"""Course: steps through the pages; each asks a question, then reveals what holds on the learner's own text.

The step and the answers live in the link (``step``, ``answers``), so a teacher shares a step and students go on
alone; ``present=1`` opens the presenter view.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import plotly.graph_objects as go
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import Message
from sinkscope.core.names import DEFAULT_EPS
from sinkscope.core.tokens import token_labels
from sinkscope.course import STEPS, Reveal, Step, answers_param, parse_answers, reveals, step_index
from sinkscope.experiments import claims, interventions, kv_quant, stream_plan, writes
from sinkscope.findings import sources
from sinkscope.findings.heads import strongest
from sinkscope.plot.explore_figures import rolling_mean

from views.frame import Context
from views.state import navigation, session, url_state
from views.state.session import KEEP
from views.text import language, say, t
from views.widgets import charts, jobs, lab_training, lessons, presenter, scoreboard, sink_cost

Shown = tuple[Reveal, go.Figure | None]  # what a step reveals, and its one figure
KV_SMOOTHING = 4  # tokens in the rolling mean of the quantized caches' loss (the texts are short)


def restore() -> None:
    """On a session's first visit, the step and the answers a shared link carries."""
    state, params = st.session_state, st.query_params
    if "course_answers" in state:
        return
    index = step_index(params.get("step"))
    if "step" in params and index is None:
        url_state.ignore("step", params["step"])
    answers, unknown = parse_answers(params.get("answers"))
    for part in unknown:
        url_state.ignore("answers", part)
    state["course_step"], state["course_answers"] = index or 0, answers
    present = params.get("present", "0")
    if present not in ("0", "1"):
        url_state.ignore("present", present)
    state.setdefault("present", present == "1")


def answer(index: int, choice: str) -> None:
    answers = list(st.session_state["course_answers"])
    answers[index] = choice
    st.session_state["course_answers"] = tuple(answers)


def go_to(index: int) -> None:
    st.session_state["course_step"] = index


def head_map(request: session.Request, trace: Trace) -> Shown:
    return reveals.of_map(trace), plot.fig_head_map(trace.heads, "sink", lang=language())


def budget(request: session.Request, trace: Trace) -> Shown:
    shown = reveals.of_budget(trace)
    layer, head = strongest(trace.heads, "sink")  # the head the sentence names
    maps = jobs.layer_maps(request, trace, layer)
    labels = token_labels(trace.tokens)
    title = t("explorer.head_title", layer=layer, head=head)
    return shown, plot.fig_attention(maps.weights[head], labels, labels, title, lang=language())


def reads(request: session.Request, trace: Trace) -> Shown:
    return reveals.of_reads(trace), plot.fig_sink_scatter(trace.heads, lang=language())


def massive(request: session.Request, trace: Trace) -> Shown:
    return reveals.of_massive(trace), plot.fig_magnitudes(trace.layers, lang=language())


def origins(request: session.Request, trace: Trace) -> Shown:
    """The write that builds the first token's sink, removed at the first token as the origins page does."""
    built = writes.first_writes(trace) if trace.writes is not None else None
    if built is None or built.builder is None:
        return reveals.of_origins(trace, None), None
    change = built.builder
    runs = [lessons.outcome(request, trace.token_ids, c) for c in (None, change)]
    fig = plot.fig_channel_writes(built.in_channel, built.channel, lang=language())
    return reveals.of_origins(trace, writes.WriteRemoved(change, *runs, DEFAULT_EPS)), fig


def break_sink(request: session.Request, trace: Trace) -> Shown:
    change = interventions.default_drop(trace.shape[0])  # the break page's default, so both show one number
    intact, removed = (lessons.outcome(request, trace.token_ids, c) for c in (None, change))
    layers = list(range(trace.shape[0]))
    series = {t("lesson.intact"): intact.heads["sink"].mean(1).tolist(), say(change.message):
              removed.heads["sink"].mean(1).tolist()}  # fmt: skip
    fig = plot.fig_lines(layers, series, t("lesson.sinks_title"), t("fig.layer"), "sink")
    return reveals.of_break(intact, removed), fig


def streaming(request: session.Request, trace: Trace) -> Shown:
    ppl = scoreboard.streaming_check(request)
    fig = plot.fig_stream_check(ppl, stream_plan.check_values(), t("stream.engine_mask"), lang=language())
    return reveals.of_streaming(ppl), fig


def kv(request: session.Request, trace: Trace) -> Shown:
    """The scoreboard's quantized caches of the learner's text, with and without the sinks, beside the float cache (a
    family whose cache the quantizer never sees is refused in the library's one sentence)."""
    intact = lessons.outcome(request, trace.token_ids, None)
    _, bare, kept = jobs.run(scoreboard.kv_claim_job(request, trace), t("kv.measuring")).of_own()
    names = (t("kv.dense"), t("kv.protect_none"), t("kv.protect_sinks"))
    series = {name: rolling_mean(nll, KV_SMOOTHING).tolist() for name, nll in zip(names, (intact.nll, bare, kept),
                                                                                   strict=True)}  # fmt: skip
    fig = plot.fig_lines(list(range(1, trace.n_tokens)), series, t("kv.curve_title", bits=kv_quant.CLAIM_BITS,
                         n=KV_SMOOTHING), t("fig.position"), t("kv.loss"))  # fmt: skip
    return reveals.of_kv(intact, bare, kept, len(kv_quant.detected_sinks(trace))), fig


def kinds(request: session.Request, trace: Trace) -> Shown:
    return reveals.of_kinds(trace), plot.fig_kind_counts(trace.heads["kind"], lang=language())


def cost(request: session.Request, trace: Trace) -> Shown:
    result = sink_cost.shipped()
    return reveals.of_cost(result), sink_cost.chart(result)


def lab(request: session.Request, trace: Trace) -> Shown:
    runs = lab_training.shipped_runs("backcopy")
    toy_sink = next(v for v in claims.from_lab(list(runs.values())) if v.claim == "toy_sink")
    first = runs.get(("softmax", 0))
    return reveals.of_lab(toy_sink), lab_training.bos_figure(first) if first is not None else None


def scoreboard_step(request: session.Request, trace: Trace) -> Shown:
    verdicts = scoreboard.shown(request, trace, scoreboard.PROJECTED if presenter.presenting() else ())
    return reveals.of_claims(verdicts), None


SHOWN: dict[str, Callable[[session.Request, Trace], Shown]] = {
    "map": head_map, "budget": budget, "reads": reads, "massive": massive, "origins": origins, "break": break_sink,
    "streaming": streaming, "kv": kv, "kinds": kinds, "cost": cost, "lab": lab, "claims": scoreboard_step,
}  # fmt: skip


OFF_TEXT: dict[str, Callable[[], Message]] = {
    "streaming": lambda: sources.builtin(stream_plan.CHECK.tokens),
    "cost": lambda: sources.synthetic(sink_cost.shipped()["dim"]),
    "lab": lambda: sources.lab_runs(len(lab_training.shipped_runs("backcopy"))),
}  # the steps whose figure and verdict are not computed on the learner's text, and what they are computed on
LINKED: dict[str, Callable[[], dict[str, str]]] = {"streaming": stream_plan.link_values}  # a page opened on the step's
# own settings, so its numbers are the step's


def choice_label(step: Step, choice: str) -> str:
    return t(step.key(choice), **reveals.choice_values(step))


def question(index: int, step: Step) -> str | None:
    """The question; before it is answered, the choices and Reveal. Returns the answer, once there is one."""
    st.subheader(t(step.key("question"), **reveals.question_values(step)))
    chosen = st.session_state["course_answers"][index]
    if chosen is not None:
        return chosen
    label = partial(choice_label, step)
    pick = st.radio(t("course.your_answer"), step.choices, index=None, format_func=label, key=f"course_pick_{index}")
    st.button(t("course.reveal"), type="primary", disabled=pick is None, on_click=answer, args=(index, pick))
    return None


def reveal(step: Step, chosen: str, request: session.Request, trace: Trace) -> None:
    """The learner's answer against what holds here, the sentences computed from it, and the step's figure (beside
    them in the presenter view, so question, answer and figure share one screen)."""
    verdict, figure = st.columns([2, 3]) if presenter.presenting() else (st.container(), st.container())
    with figure:
        shown = lessons.attempt(lambda: SHOWN[step.id](request, trace))
    if shown is None:
        return
    found, fig = shown
    label = partial(choice_label, step)
    with verdict:
        on = OFF_TEXT[step.id]() if step.id in OFF_TEXT else None
        if chosen == found.truth:
            st.success(t("course.right", answer=label(chosen)))
        else:
            here = "course.here" if on is None else "course.here_elsewhere"  # "on this model and text" only if so
            st.info(t(here, answer=label(chosen), truth=label(found.truth)))
        for sentence in found.said:
            st.markdown(say(sentence))
        if on is not None and fig is None:
            charts.computed_on(on)
    if fig is not None:
        charts.show(presenter.projected(fig), f"course_{step.id}", figure, presenter.figure_height(), on)
    link = navigation.page_at(step.page)
    verdict.page_link(
        link,
        label=t("course.open_page"),
        icon=":material/arrow_outward:",
        query_params=url_state.view_params() | LINKED.get(step.id, dict)(),
    )


def step_buttons(index: int) -> None:
    back, ahead = st.columns(2)
    back.button(t("course.previous"), disabled=index == 0, on_click=go_to, args=(index - 1,), key="course_back")
    if index + 1 < len(STEPS):
        ahead.button(t("course.next"), type="primary", on_click=go_to, args=(index + 1,), key="course_next")
    else:
        ahead.markdown(t("course.finished"))


def page(context: Context) -> None:
    """Course: the current step, its question, and once answered its result on the sidebar's text."""
    restore()
    if st.session_state.get("present"):
        presenter.apply()
    index = st.session_state["course_step"]
    step = STEPS[index]
    title, toggle = st.columns([2, 1], vertical_alignment="center")
    title.title(t("course.title"))
    toggle.toggle(t("course.presenter"), key="present", persist_state=KEEP)
    st.progress((index + 1) / len(STEPS), text=t("course.step_of", step=index + 1, steps=len(STEPS),
                                                  title=t(step.key("title"))))  # fmt: skip
    analysis = context.analysis()
    chosen = question(index, step)
    if chosen is not None and analysis is not None:
        reveal(step, chosen, analysis.request, analysis.trace)
    step_buttons(index)
    course = {"step": str(index + 1), "answers": answers_param(st.session_state["course_answers"])}
    url_state.sync_url(course | ({"present": "1"} if st.session_state.get("present") else {}))
