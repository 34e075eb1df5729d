"""Explorer: which heads sink, which look at themselves, and what each one actually reads."""

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import Text
from sinkscope.core.metrics import (
    shown_metrics,
    value_scaled,
    value_scaled_past,
    value_weighted,
    without_first_keys,
)
from sinkscope.core.names import DEFAULT_EPS, HEAD_COLUMNS, KIND_THRESHOLD, LAYER_COLUMNS
from sinkscope.core.tokens import token_labels
from sinkscope.course import STEPS
from sinkscope.findings.heads import kind_shares, kinds_seen

from views.frame import Context
from views.state import navigation, session, url_state
from views.state.session import KEEP
from views.text import kind_label, language, local_table, metric_label, num, plain, say, t
from views.widgets import charts, head_picker, jobs
from views.widgets.html_maps import clicked_head, head_map, kind_counts, picked_query
from views.widgets.html_maps import lit_text as lit
from views.widgets.key_map import key_map
from views.widgets.sliders import EPS_STEPS, decimal_slider

ZOOM = 256  # the one-head map shows at most ZOOM x ZOOM cells at full resolution


def map_tab(trace: Trace) -> None:
    st.session_state.setdefault("eps", DEFAULT_EPS)
    eps = decimal_slider(st, t("explorer.eps"), EPS_STEPS, DEFAULT_EPS, "eps")
    label = t("explorer.sink_rate", eps=num(eps, ".2f"), n=trace.n_tokens)
    st.metric(label, t("explorer.of_heads", rate=num(trace.sink_rate(eps), ".1f")))
    st.caption(t("explorer.sink_rate_help"))
    metrics = shown_metrics(trace.heads)
    metric = st.radio(t("explorer.colour_by"), metrics, horizontal=True, key="metric", persist_state=KEEP,
                      format_func=Text(language()).metric)  # fmt: skip
    left, right = st.columns([3, 2])
    with left:
        head_map(trace.heads, metric, key="head_map", on_click=open_clicked_head)
    left.caption(t("explorer.click_to_open"))
    charts.downloads(plot.fig_head_map(trace.heads, metric, lang=language()), "head_map", left)
    with right:
        kind_counts(trace.heads["kind"], key="kind_counts")
    charts.downloads(plot.fig_kind_counts(trace.heads["kind"], lang=language()), "kind_counts", right)
    sink_kind = num(kind_shares(trace.heads["kind"])["sink"], ".0f")
    between = round((eps + KIND_THRESHOLD) / 2, 2)  # a head between the two thresholds: counted, yet mixed
    right.caption(t("explorer.two_thresholds", eps=num(eps, ".2f"), rate=num(trace.sink_rate(eps), ".0f"),
                    kind=sink_kind, threshold=KIND_THRESHOLD, between=between))  # fmt: skip
    right.page_link(navigation.page_at("metrics"), label=t("side.definitions"), icon=":material/menu_book:")
    key_map(trace, "key_map")
    st.page_link(navigation.page_at("origins"), label=t("explorer.to_origins"), icon=":material/genetics:")
    table = pd.DataFrame(trace.head_rows())
    shown = table[["layer", "head", *metrics]].assign(kind=table["kind"].map(kind_label))  # the CSV keeps English
    shown = shown.rename(columns={"layer": t("fig.layer"), "head": t("fig.head"), "kind": t("explorer.kind")}
                         | {metric: metric_label(metric) for metric in metrics})  # fmt: skip
    widths = [50, 50, *[72] * len(metrics), 90]  # pixels: layer, head, the metrics, kind fit at 1024 px
    narrow = {column: st.column_config.Column(width=w) for column, w in zip(shown.columns, widths, strict=True)}
    st.dataframe(local_table(shown), hide_index=True, key="heads_table", height=320, column_config=narrow)
    layers = pd.DataFrame(trace.layer_rows())
    download = st.columns(2)
    heads_csv = table[list(HEAD_COLUMNS)].to_csv(index=False)
    download[0].download_button(t("explorer.heads_csv"), heads_csv, "heads.csv", on_click="ignore")
    layers_csv = layers[list(LAYER_COLUMNS)].to_csv(index=False)
    download[1].download_button(t("explorer.layers_csv"), layers_csv, "layers.csv", on_click="ignore")


def open_clicked_head() -> None:
    """A click on a head map cell opens that head in "One head"."""
    state = st.session_state
    clicked = clicked_head("head_map")
    if clicked:
        state["layer"], state["head"] = clicked
        state["tab_id"] = "one"
        state.pop("tab", None)  # tabs() sets the open tab from tab_id, in this viewer's language


def matrix_to_csv(matrix: np.ndarray, labels: list[str]) -> str:
    return pd.DataFrame(matrix, index=labels, columns=labels).to_csv()


def window_of(n_tokens: int) -> tuple[slice, slice]:
    """Which rows and columns to show at full resolution; everything (pooled) by default."""
    if n_tokens <= ZOOM or not st.toggle(t("explorer.zoom"), key="zoom"):
        return slice(None), slice(None)
    top = st.slider(t("explorer.queries_from"), 0, n_tokens - ZOOM, 0, key="query_start")
    left = st.slider(t("explorer.keys_from"), 0, n_tokens - ZOOM, 0, key="key_start")
    return slice(top, top + ZOOM), slice(left, left + ZOOM)


def head_summary(trace: Trace, layer: int, head: int) -> None:
    heads, learned = trace.heads, trace.learned_sinks
    cells = st.columns(5 if learned else 4)
    cells[0].metric(metric_label("sink"), num(heads["sink"][layer, head]))
    cells[1].metric(metric_label("value_sink"), num(heads["value_sink"][layer, head]))
    ratio = num(heads["value_norm_ratio"][layer, head], ".2f")
    cells[2].metric(t("explorer.value_ratio"), ratio, help=t("explorer.value_ratio_help"))
    head_picker.kind_cell(cells[3], heads["kind"][layer, head])
    if learned:
        cells[4].metric(metric_label("learned_sink"), num(heads["learned_sink"][layer, head]),
                        help=t("explorer.learned_help"))  # fmt: skip


def reads_map(weights: np.ndarray, value_norms: np.ndarray, value_units: bool, past_sink: bool) -> np.ndarray:
    """The right map of One head: where each query's output comes from (or what it writes, in a typical value's
    units), past the sink as the left map is when asked: the first key hidden and the rows renormalized."""
    if value_units:
        return value_scaled_past(weights, value_norms) if past_sink else value_scaled(weights, value_norms)
    weighted = value_weighted(weights, value_norms)
    return without_first_keys(weighted) if past_sink else weighted


def reads_map_labels(value_units: bool, past_sink: bool) -> tuple[str, str, str | None]:
    """(title, formula, unit) of the right map."""
    past = t("explorer.past_suffix") if past_sink else ""
    if value_units:
        return t("explorer.writes_title") + past, t("explorer.writes_formula"), "fig.typical_values"
    return t("explorer.reads_title") + past, t("explorer.reads_formula"), None


def pick_query() -> None:
    """A token clicked (or picked with Enter) in the lit text becomes its query."""
    picked = picked_query("lit_text")
    if picked is not None:
        st.session_state["query_token"] = picked


def lit_text(trace: Trace, weights: np.ndarray, shown: np.ndarray, past_sink: bool) -> None:
    """The text lit by one query's attention over its keys, the query picked on a slider or in the text; the first
    token's share named. ``shown``: the left map's rows (renormalized past the sink when asked)."""
    st.subheader(t("explorer.lit_title"))
    last = trace.n_tokens - 1
    st.session_state["query_token"] = min(max(st.session_state.get("query_token", last), 0), last)
    query = st.slider(t("explorer.lit_query"), 0, last, key="query_token")
    row = np.concatenate([[np.nan], shown[query]]) if past_sink else shown[query]  # (token,): key 0 unshaded past it
    largest = float(np.nanmax(row[: query + 1])) if np.isfinite(row[: query + 1]).any() else float("nan")
    said = "explorer.lit_sink_past" if past_sink else "explorer.lit_sink"
    st.markdown(t(said, token=plain(trace.tokens[0]), share=num(float(weights[query, 0])), largest=num(largest)))
    lit(list(trace.tokens), row, query, key="lit_text", on_pick=pick_query)


@st.fragment
def one_head(request: session.Request, trace: Trace) -> None:
    """Scrubbing layer and head reruns only this fragment: the model is never run again here."""
    session.choose_language()  # a fragment rerun may run on a fresh thread, without app.py's setting
    layer, head = head_picker.pick_head(trace)
    if layer not in trace.attention_layers:  # a hybrid's Mamba or linear layer: no map to draw
        st.info(t("explorer.no_attention", layer=layer, layers=", ".join(map(str, trace.attention_layers))))
        return
    options = st.columns(2)
    log_scale = options[0].toggle(t("explorer.log_scale"), key="log_scale", persist_state=KEEP)
    past_sink = options[1].toggle(t("explorer.past_sink"), key="past_sink", help=t("common.past_sink_help"),
                                   persist_state=KEEP)  # fmt: skip
    value_units = st.toggle(
        t("explorer.value_units"), key="value_units", persist_state=KEEP
    )  # full width: a long label
    maps = jobs.layer_maps(request, trace, layer)
    head_summary(trace, layer, head)
    labels = token_labels(trace.tokens)
    rows, cols = window_of(trace.n_tokens)
    raw, first_key = maps.weights[head], 0
    if past_sink:
        raw, first_key = without_first_keys(raw), 1  # renormalized over keys 1..t: the structure under the sink
    title = t("explorer.head_title_past" if past_sink else "explorer.head_title", layer=layer, head=head)
    ghost = maps.learned[head][rows] if trace.learned_sinks and not past_sink else None
    fig = plot.fig_attention(
        raw[rows, cols], labels[rows], labels[first_key:][cols], title, log_scale, ZOOM, lang=language(), ghost=ghost
    )
    read_title, formula, unit = reads_map_labels(value_units, past_sink)
    read = plot.fig_attention(
        reads_map(maps.weights[head], maps.value_norms[head], value_units, past_sink)[rows, cols],
        labels[rows], labels[first_key:][cols], read_title, log_scale, ZOOM, formula, language(), unit=unit,
    )  # fmt: skip
    left, right = st.columns(2)
    charts.show(fig, "one_head_map", left)
    charts.show(read, "value_weighted_map", right)
    st.caption(t("explorer.pure_sink_note"))
    lit_text(trace, maps.weights[head], raw, past_sink)
    if ghost is not None:
        st.caption(t("explorer.ghost_note", share=num(float(trace.heads["learned_sink"][layer, head]))))
    name = f"layer{layer}_head{head}"
    download = st.columns(2)  # callables: the files are built only when clicked
    matrix_csv = partial(matrix_to_csv, maps.weights[head], labels)
    download[0].download_button(t("explorer.matrix_csv"), matrix_csv, f"{name}.csv", on_click="ignore")
    page = partial(plot.figure_html, fig)
    download[1].download_button(t("explorer.figure_html"), page, f"{name}.html", on_click="ignore")
    layer_thumbs = jobs.layer_strip(request, trace, layer)  # (1, head, rows, cols)
    title = t("explorer.layer_heads", layer=layer)
    fig = plot.fig_thumbnails(layer_thumbs, t("fig.layer"), title, lang=language(), first_row=layer)
    charts.show(fig, "layer_heads")
    url_state.sync_url()


def all_heads(request: session.Request, trace: Trace) -> None:
    thumbs = jobs.thumbnails(request, trace.token_ids)
    title = t("explorer.all_heads_title", layers=thumbs.shape[0], heads=thumbs.shape[1])
    charts.show(plot.fig_thumbnails(thumbs, t("fig.layer"), title, lang=language()), "all_heads")
    st.caption(say(kinds_seen(trace.heads["kind"])))


TABS = dict(
    zip(
        url_state.TAB_IDS,
        ("explorer.tab_map", "explorer.tab_one", "explorer.tab_all", "explorer.tab_depth"),
        strict=True,
    )
)


def depth(trace: Trace) -> None:
    charts.show(plot.fig_depth_profile(trace.heads, trace.layers, lang=language()), "depth")


def tabs(request: session.Request, trace: Trace) -> None:
    """Only the open tab runs (a hidden "All heads" costs nothing), and the URL keeps which one is open."""
    labels = {tab: t(key) for tab, key in TABS.items()}
    state = st.session_state
    if state.get("tab") not in labels.values():  # first run, a restored link, or another language
        state["tab"] = labels[state.get("tab_id", "map")]
    containers = st.tabs(list(labels.values()), key="tab", on_change="rerun")
    state["tab_id"] = next(tab for tab, label in labels.items() if label == state["tab"])
    draw = {"map": lambda: map_tab(trace), "one": lambda: one_head(request, trace),
            "all": lambda: all_heads(request, trace), "depth": lambda: depth(trace)}  # fmt: skip
    for tab, container in zip(labels, containers, strict=True):
        if container.open:
            with container:
                draw[tab]()


def page(context: Context) -> None:
    """Explorer: which heads sink, which look at themselves, and what each one actually reads."""
    st.title(t("explorer.title"))
    st.markdown(t("explorer.first_screen"))
    st.page_link(navigation.page_at("course"), label=t("explorer.new_here", steps=len(STEPS)), icon=":material/school:")
    analysis = context.analysis()
    if analysis is not None:
        tabs(analysis.request, analysis.trace)
    url_state.sync_url()
