"""Lesson 2: does a sink head read its sink? The sink heads counted by how much of their output comes from it."""

import numpy as np
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.core.metrics import value_weighted
from sinkscope.core.tokens import token_labels
from sinkscope.findings.heads import sink_reading

from views.frame import Context
from views.state import session
from views.text import language, metric_label, num, percent, say, t
from views.widgets import charts, head_picker, jobs, lessons


def one_head(request: session.Request, trace: Trace) -> None:
    heads = trace.heads
    layer, head = head_picker.pick_head(trace)
    cells = st.columns([4, 3, 3, 3])  # the first name is the longest ("escore de sorvedouro"): its label stays whole
    cells[0].metric(metric_label("sink"), num(heads["sink"][layer, head]), help=t("reads.sink"))
    cells[1].metric(metric_label("value_sink"), num(heads["value_sink"][layer, head]), help=t("reads.value_sink"))
    ratio = num(heads["value_norm_ratio"][layer, head], ".2f")
    cells[2].metric(t("explorer.value_ratio"), ratio, help=t("explorer.value_ratio_help"))
    head_picker.kind_cell(cells[3], heads["kind"][layer, head])
    maps = jobs.layer_maps(request, trace, layer)
    labels = token_labels(trace.tokens)
    looks = t("reads.looks_title")
    raw = plot.fig_attention(
        maps.weights[head], labels, labels, looks, subtitle=t("reads.looks_formula"), lang=language()
    )
    read = value_weighted(maps.weights[head], maps.value_norms[head])
    reads = t("explorer.reads_title")
    read_fig = plot.fig_attention(read, labels, labels, reads, subtitle=t("explorer.reads_formula"), lang=language())
    left, right = st.columns(2)
    charts.show(raw, "rn_raw", left)
    charts.show(read_fig, "rn_read", right)
    typical = float(np.median(maps.value_norms[head][1:])) if trace.n_tokens > 1 else float("nan")
    series = {
        t("reads.output_line"): maps.output_norms[head].tolist(),
        t("reads.typical_line"): [typical] * trace.n_tokens,
    }
    title = t("reads.output_title", layer=layer, head=head)
    charts.show(plot.fig_lines(labels, series, title, t("softmax.query_token"), t("reads.norm_axis")), "rn_output")
    st.caption(t("reads.output_help"))


def key_geometry(request: session.Request, trace: Trace) -> dict[str, np.ndarray] | None:
    found = lessons.attempt(lambda: lessons.geometry(request, trace.token_ids))
    if found is None:
        return None
    layers = list(range(len(found["first_key_norm"])))
    norms = {
        t("reads.first_key"): found["first_key_norm"].tolist(),
        t("reads.other_keys"): found["other_key_norm"].tolist(),
    }
    cosines = {
        t("reads.with_first"): found["first_key_cosine"].tolist(),
        t("reads.with_earlier"): found["other_key_cosine"].tolist(),
    }
    left, right = st.columns(2)
    norm_fig = plot.fig_lines(layers, norms, t("reads.key_norm_title"), t("fig.layer"), "‖k‖")
    charts.show(norm_fig, "rn_key_norm", left)
    cos_fig = plot.fig_lines(layers, cosines, t("reads.cosine_title"), t("fig.layer"), t("reads.cosine"))
    charts.show(cos_fig, "rn_key_cos", right)
    st.caption(t("reads.geometry_help"))
    return found


def paper(trace: Trace, found: dict[str, np.ndarray] | None) -> None:
    value_ratio = sink_reading(trace.heads).value_ratio
    key_ratio = np.median(found["first_key_norm"] / found["other_key_norm"]) if found is not None else float("nan")
    norm_ratio = num(np.nanmax(trace.layers["first_norm_ratio"]), ".0f")
    lessons.paper_table(
        [
            (t("reads.paper_norm"), t("reads.huge"), t("reads.up_to", ratio=norm_ratio)),
            (t("reads.paper_key"), t("reads.small"), t("reads.median_layers", ratio=num(key_ratio, ".2f"))),
            (t("reads.paper_value"), t("reads.small"), num(value_ratio, ".2f")),
            (t("reads.paper_rate"), t("reads.paper_rates"), percent(trace.sink_rate())),
        ],
        t("reads.paper_source"),
    )


def reading_sinks(trace: Trace) -> str:
    """How many sink heads read their sink on this text, how many read little or almost nothing (one finding,
    ``findings.heads.sink_reading``, as course step 3 and the scoreboard state it), and the clearest reader."""
    found = sink_reading(trace.heads)
    if not found.sinks:
        return say(found.said())
    if found.clearest is None:
        return "\n\n".join((say(found.said()), t("reads.none_read")))
    layer, head = found.clearest
    clearest = t("reads.some_read", layer=layer, head=head, sink=num(trace.heads["sink"][layer, head]),
                 value_sink=num(trace.heads["value_sink"][layer, head]))  # fmt: skip
    return "\n\n".join((say(found.said()), clearest))


def show(request: session.Request, trace: Trace) -> None:
    one_head(request, trace)
    st.subheader(t("reads.scatter_heading"))
    charts.show(plot.fig_sink_scatter(trace.heads, lang=language()), "rn_scatter")
    st.markdown(reading_sinks(trace))
    st.subheader(t("reads.geometry_heading"))
    paper(trace, key_geometry(request, trace))


def page(context: Context) -> None:
    """Lesson 2: does a sink head read its sink? The sink heads counted by how much of their output comes from it."""
    lessons.lesson(context, ("reads.title", "reads.intro"), show)
