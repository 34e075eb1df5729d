"""KV-cache lab: compress the cache and see why the sinks must survive (a quantized cache, with and without its
sinks in full precision)."""

import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.experiments import kv_quant
from sinkscope.plot.explore_figures import rolling_mean

from views.state import cache, session
from views.text import local_table, num, plain, say, t, times
from views.widgets import charts, lessons

SHOWN_BITS = (2, 3, 4)  # the form's first choice: where protection matters
SMOOTHING = 8  # tokens in the rolling mean of a loss curve
PAPER_BITS = 3  # IntactKV's figure is at INT3


def choices() -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """The bits and protections asked for (kept across reruns), or None before the first run."""
    with st.form("kv_form"):
        cells = st.columns(2)
        bits = cells[0].multiselect(t("kv.bits"), kv_quant.BITS, default=list(SHOWN_BITS), key="kv_bits")
        protect = cells[1].multiselect(t("kv.protect"), kv_quant.PROTECTIONS, default=list(kv_quant.PROTECTIONS),
                                       format_func=lambda p: t(kv_quant.PROTECT_KEYS[p]), key="kv_protect")  # fmt: skip
        if st.form_submit_button(t("kv.run"), type="primary") and bits and protect:
            st.session_state["kv_asked"] = (tuple(sorted(bits)), tuple(p for p in kv_quant.PROTECTIONS if p in protect))
    return st.session_state.get("kv_asked")


def table(rows: list[kv_quant.KVRow]) -> None:
    dense = rows[0].perplexity
    shown = [{t("kv.col_bits"): row.bits or t("kv.dense"), t("kv.col_protect"): t(kv_quant.PROTECT_KEYS[row.protect])
              if row.bits else "—", t("kv.col_ppl"): row.perplexity, t("kv.col_ratio"): times(row.perplexity / dense)}
             for row in rows]  # fmt: skip
    st.dataframe(local_table(pd.DataFrame(shown), 2), hide_index=True, key="kv_table")


def curves(rows: list[kv_quant.KVRow], trace: Trace) -> None:
    """The per-token loss of the fewest bits measured, one line per protection, beside the dense cache."""
    fewest = min(row.bits for row in rows if row.bits)
    series = {t("kv.dense"): rows[0].nll}
    series |= {t(kv_quant.PROTECT_KEYS[row.protect]): row.nll for row in rows if row.bits == fewest}
    smoothed = {name: rolling_mean(nll, SMOOTHING).tolist() for name, nll in series.items()}
    positions = list(range(1, trace.n_tokens))
    fig = plot.fig_lines(positions, smoothed, t("kv.curve_title", bits=fewest, n=SMOOTHING), t("fig.position"),
                         t("kv.loss"))  # fmt: skip
    charts.show(fig, "kv_curves")


def quantized(request: session.Request, trace: Trace) -> None:
    st.subheader(t("kv.quant_heading"))
    st.markdown(t("kv.quant_intro", group=kv_quant.GROUP, first=kv_quant.FIRST_KEPT))
    asked = choices()
    sinks = kv_quant.detected_sinks(trace)
    st.caption(plain(t("kv.sinks_kept", tokens=", ".join(f"{j}:{trace.tokens[j]}" for j in sinks) or "—")))
    if asked is None:
        return
    loaded = cache.get_model(request.model, request.dtype)
    run = lambda: kv_quant.quantized_table(loaded, trace, *asked)  # noqa: E731
    rows = lessons.attempt(lambda: lessons.cached(request, "kv_quant", (trace.token_ids, *asked), run,
                                                  t("kv.measuring")))  # fmt: skip
    if rows is None:
        return
    table(rows)
    found = kv_quant.said(rows)
    if found is not None:
        st.markdown(say(found))
    curves(rows, trace)
    lessons.paper_table([(t("kv.paper_intactkv", bits=PAPER_BITS), t("kv.paper_intactkv_value"), yours(rows))],
                        t("kv.paper_source"))  # fmt: skip


def yours(rows: list[kv_quant.KVRow]) -> str:
    """This text's perplexity at the paper's bits, without protection and with the sinks kept."""
    at = {row.protect: row.perplexity for row in rows if row.bits == PAPER_BITS}
    if not {"none", "sinks"} <= set(at):
        return t("kv.paper_run", bits=PAPER_BITS)
    return t("kv.paper_yours", none=num(at["none"], ".1f"), kept=num(at["sinks"], ".1f"))


def page() -> None:
    """KV-cache lab: a quantized cache, with and without its sinks in full precision."""
    lessons.lesson(("kv.title", "kv.intro"), quantized)
