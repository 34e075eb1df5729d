"""KV-cache lab: compress the cache and see why the sinks must survive (a quantized cache, with and without its
sinks in full precision; eviction policies at one budget; which heads need more than sinks + a window)."""

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core import names
from sinkscope.core.capture import Trace, analyze_ids
from sinkscope.core.errors import SinkscopeError
from sinkscope.core.i18n import Message
from sinkscope.core.loss import LEVEL, mean_difference, perplexity
from sinkscope.core.models import LoadedModel
from sinkscope.core.texts import builtin_text
from sinkscope.core.tokens import display_tokens
from sinkscope.experiments import kv_evict, kv_heads, kv_quant, passkey
from sinkscope.findings import sources, words
from sinkscope.plot import kv_slides

from views.frame import Context
from views.state import cache, session
from views.text import language, local_table, num, percent, plain, say, t, times
from views.widgets import charts, jobs, lessons

SHOWN_BITS = (2, 3, 4)  # the form's first choice: where protection matters
EVICT_TOKENS = (128, 256, 512)  # tokens of Python's help the policies run over
BUDGETS = (16, 32, 64, 128)  # cache sizes to choose from


def measured(request: session.Request, what: str, args: tuple, stop_key: str, text: str,
             run: Callable[[cache.Show], Any]) -> Any | None:  # fmt: skip
    """``run(show)`` as the one job helper runs it: shared by every session once it completes, in the model's queue,
    with a bar that ``show`` moves and a Stop button (a stopped run is not kept); None after saying why it failed."""
    job = cache.Job(request.model, (what, request.dtype, *args), run)
    return lessons.attempt(lambda: jobs.run(job, text, stop=(stop_key, "kv.stop_help")))


def choices() -> tuple[tuple[int, ...], tuple[str, ...], int | None] | None:
    """The bits, protections and residual window asked for (kept across reruns), or None before the first run."""
    with st.form("kv_form"):
        cells = st.columns(3)
        bits = cells[0].multiselect(t("kv.bits"), kv_quant.BITS, default=list(SHOWN_BITS), key="kv_bits")
        protect = cells[1].multiselect(t("kv.protect"), kv_quant.PROTECTIONS, default=list(kv_quant.PROTECTIONS),
                                       format_func=lambda p: t(names.PROTECT_KEYS[p]), key="kv_protect")  # fmt: skip
        residual = cells[2].selectbox(
            t("kv.residual"),
            [*kv_quant.RESIDUALS, None],
            key="kv_residual",
            index=kv_quant.RESIDUALS.index(kv_quant.RESIDUAL),
            format_func=residual_label,
        )
        if st.form_submit_button(t("kv.run"), type="primary") and bits and protect:
            protections = tuple(p for p in kv_quant.PROTECTIONS if p in protect)
            st.session_state["kv_asked"] = (tuple(sorted(bits)), protections, residual)
            st.session_state.pop("kv_rows_partial", None)  # asked again: a stopped run starts over
    return st.session_state.get("kv_asked")


def residual_label(residual: int | None) -> str:
    """A residual window as the form offers it; None is the old non-causal cache, a pessimistic bound."""
    return t("kv.residual_bound") if residual is None else t("kv.residual_tokens", n=residual)


def table(rows: list[kv_quant.KVRow]) -> None:
    """Each cache's perplexity and its ratio to the dense cache, with that ratio's bootstrap interval."""
    dense = rows[0]
    shown = [{t("kv.col_bits"): row.bits or t("kv.dense"), t("kv.col_protect"): t(names.PROTECT_KEYS[row.protect])
              if row.bits else "—", t("kv.col_ppl"): row.perplexity, t("kv.col_ratio"): times(row.perplexity /
              dense.perplexity), t("kv.col_interval", level=round(100 * LEVEL)): ratio_interval(row, dense)}
             for row in rows]  # fmt: skip
    st.dataframe(local_table(pd.DataFrame(shown), 2), hide_index=True, key="kv_table")
    st.caption(t("kv.read_as", residual=residual_label(dense.residual), level=round(100 * LEVEL)))


def ratio_interval(row: kv_quant.KVRow, dense: kv_quant.KVRow) -> str:
    """The perplexity ratio's interval over the text's tokens: exp of the mean loss difference's."""
    if not row.bits:
        return "—"
    found = mean_difference(row.nll, dense.nll)
    return t("kv.interval", low=num(math.exp(found.low), ".2f"), high=num(math.exp(found.high), ".2f"))


def quantized_rows(request: session.Request, trace: Trace, asked: tuple) -> list[kv_quant.KVRow] | None:
    """The rows asked for on this text (a stopped run keeps its rows until asked again)."""
    key = (trace.token_ids, asked)
    partial = st.session_state.get("kv_rows_partial")
    if partial is not None and partial[0] == key:
        st.caption(t("kv.quant_stopped", done=len(partial[1]), total=1 + len(asked[0]) * len(asked[1])))
        return partial[1]
    loaded = request.loaded

    def run(show: cache.Show) -> list[kv_quant.KVRow]:
        def progress(rows: list[kv_quant.KVRow], total: int) -> bool:
            st.session_state["kv_rows_partial"] = (key, list(rows))
            show(len(rows) / total, t("kv.quant_progress", done=len(rows), total=total))
            return True

        return kv_quant.quantized_table(loaded, trace, *asked, progress=progress)

    rows = measured(request, "kv_quant", (trace.token_ids, *asked), "kv_quant_stop", t("kv.measuring"), run)
    if rows is not None:
        st.session_state.pop("kv_rows_partial", None)
    return rows


def quantized(request: session.Request, trace: Trace) -> None:
    st.subheader(t("kv.quant_heading"))
    st.markdown(t("kv.quant_intro", group=kv_quant.GROUP, first=kv_quant.FIRST_KEPT, residual=kv_quant.RESIDUAL))
    asked = choices()
    sinks = kv_quant.detected_sinks(trace)
    st.caption(plain(t("kv.sinks_kept", tokens=", ".join(f"{j}:{trace.tokens[j]}" for j in sinks) or "—")))
    if asked is None:
        return
    rows = quantized_rows(request, trace, asked)
    if rows is None:
        return
    table(rows)
    found = kv_quant.said(rows)
    if found is not None:
        st.markdown(say(found))
    if len(rows) > 1:  # a run stopped after the dense cache has no quantized curve yet
        charts.show(kv_slides.quantized_curves(rows, lang=language()), "kv_curves")


TEXTS = {"builtin": "stream.source_builtin", "own": "stream.source_sidebar"}


def chosen_text(request: session.Request, n_tokens: int, key: str) -> tuple[list[int], Message]:
    """The first ``n_tokens`` of Python's help, or of the visitor's text where it is that long and they choose it,
    and the line under the controls that says which."""
    try:
        own = request.loaded.encode(request.text, n_tokens, truncate=True, add_bos=False)
    except SinkscopeError:
        own = []  # an empty text: Python's help it is
    if len(own) >= n_tokens and st.radio(t("kv.text_source"), list(TEXTS), format_func=lambda k: t(TEXTS[k]),
                                         horizontal=True, key=key) == "own":  # fmt: skip
        ids, on = own, sources.own_text(n_tokens)
    else:
        ids, on = (
            request.loaded.encode(builtin_text(), n_tokens, truncate=True, add_bos=False),
            sources.builtin(n_tokens),
        )
    charts.computed_on(on)
    return ids, on


def runnable(label: str, key: str, refusal: Message | None) -> bool:
    """A run's button, greyed out with the reason under it when the run cannot measure anything; True when pressed."""
    pressed = st.button(label, key=key, disabled=refusal is not None)
    if refusal is not None:
        st.caption(say(refusal))
    return pressed


def evicted(request: session.Request) -> kv_evict.Eviction | None:
    """The policies over the first tokens of Python's help (or the visitor's text), at the budget asked: a bar and
    Stop while it runs (a stopped run keeps the tokens it measured)."""
    cells = st.columns(2)
    n_tokens = cells[0].select_slider(t("kv.evict_tokens"), EVICT_TOKENS, value=EVICT_TOKENS[1], key="kv_tokens")
    budget = cells[1].select_slider(t("kv.evict_budget"), BUDGETS, value=BUDGETS[2], key="kv_budget")
    ids, on = chosen_text(request, n_tokens, "kv_text")
    if runnable(t("kv.evict_run"), "kv_evict", kv_evict.cache_refusal(len(ids), budget)):
        loaded = request.loaded

        def run(show: cache.Show) -> kv_evict.Eviction:
            def progress(so_far: np.ndarray, total: int) -> bool:  # so_far: (lane, token) NLL
                st.session_state["kv_partial"] = (budget, so_far)
                show(so_far.shape[1] / total, t("kv.evict_progress", done=so_far.shape[1], total=total))
                return True

            return kv_evict.evict(loaded, ids, budget, progress=progress)

        found = measured(request, "kv_evict", (tuple(ids), budget), "kv_stop", t("kv.evicting"), run)
        if found is not None:
            st.session_state["kv_evicted"] = (found, ids, on)
            st.session_state.pop("kv_partial", None)
    return st.session_state.get("kv_evicted", (None,))[0]


def eviction(request: session.Request) -> None:
    st.subheader(t("kv.evict_heading"))
    st.markdown(t("kv.evict_intro", sinks=kv_evict.SINKS, recent=round(100 * kv_evict.RECENT_SHARE)))
    found = evicted(request)
    partial = st.session_state.get("kv_partial")
    if partial is not None:  # a run stopped before its end: what it measured so far
        budget, so_far = partial
        st.caption(t("kv.evict_stopped", done=so_far.shape[1], budget=budget))
        rows = [{t("kv.col_policy"): t(names.POLICY_KEYS[p]), t("kv.col_ppl"): perplexity(so_far[lane])}
                for lane, p in enumerate(kv_evict.POLICIES)]  # fmt: skip
        st.dataframe(local_table(pd.DataFrame(rows), 2), hide_index=True, key="kv_partial_table")
    if found is None:
        return
    labels = [t(names.POLICY_KEYS[p]) for p in found.policies]
    rows = [{t("kv.col_policy"): label, t("kv.col_ppl"): found.perplexity(lane),
             t("kv.col_first_kept"): percent(100 * float(found.first_kept[lane]))}
            for lane, label in enumerate(labels)]  # fmt: skip
    st.dataframe(local_table(pd.DataFrame(rows), 2), hide_index=True, key="kv_evict_table")
    message = kv_evict.said(found)
    if message is not None:
        st.markdown(say(message))
    _, ids, on = st.session_state["kv_evicted"]
    tokens = list(display_tokens(request.loaded.tokenizer, ids))
    for key, fig in kv_slides.eviction_figures(found, tokens, lang=language()).items():
        charts.show(fig, key, on=on)


HOW = {"confirmed": "kv.heads_how_confirmed", "exact": "kv.heads_how_exact"}  # the map's two ways: estimated and
# confirmed near the threshold, or exact everywhere


def map_heads(loaded: LoadedModel, ids: list[int], budget: int, how: str, show: cache.Show) -> kv_heads.HeadNeeds:
    """The map, drawn as it lands (the estimate at once, then each exact unit) and kept for a Stop; other visitors
    get the model between the blocks of a unit."""
    draft = charts.Draft("kv_heads_live")
    show, pause = jobs.pausing(show)

    def landed(so_far: kv_heads.HeadNeeds) -> None:
        st.session_state["kv_heads_partial"] = so_far
        draft.draw(kv_slides.needs_map(so_far, lang=language()))

    if how == "exact":

        def layer_done(so_far: kv_heads.HeadNeeds) -> bool:
            landed(so_far)
            done, total = int(so_far.measured.all(-1).sum()), so_far.change.shape[0]
            show(done / total, t("kv.heads_progress", done=done, total=total))
            return True

        needs = kv_heads.head_needs(loaded, ids, budget, progress=layer_done, pause=pause)
    else:
        show(0.0, t("kv.heads_estimating"))
        first = kv_heads.estimate_needs(loaded, ids, budget)
        landed(first)
        total = int(first.unsettled().sum())

        def confirmed(so_far: kv_heads.HeadNeeds) -> bool:
            landed(so_far)
            done = total - int((first.unsettled() & so_far.estimates).sum())
            show(done / max(total, 1), t("kv.heads_confirming", done=done, total=total))
            return True

        needs = kv_heads.confirm_needs(loaded, ids, first, progress=confirmed, pause=pause)
    draft.clear()
    return needs


def measure_heads(request: session.Request, ids: list[int], on: Message, budget: int, how: str) -> None:
    """Every head's map over ``ids``, then DuoAttention's policies (a stopped map keeps what it measured, and its
    policies count the rest as whole)."""
    loaded = request.loaded

    def run(show: cache.Show) -> tuple:
        needs = map_heads(loaded, ids, budget, how, show)
        show(1.0, t("kv.heads_policies"))
        held_out = kv_heads.held_out_ids(loaded, len(ids))  # the policy is scored on a text the map was not built on
        policy, curve = kv_heads.duo_policy(loaded, held_out, needs), kv_heads.policy_curve(loaded, held_out, needs)
        return needs, policy, curve, ids, analyze_ids(loaded, ids).heads, on  # the heads beside the map: same text

    found = measured(request, "kv_heads", (tuple(ids), budget, how), "kv_heads_stop", t("kv.heads_measuring"), run)
    if found is not None:
        st.session_state["kv_heads"] = found
        st.session_state.pop("kv_heads_partial", None)


def head_maps(needs: kv_heads.HeadNeeds, text_heads: dict | None, on: Message | None) -> None:
    """The loss-change map, beside the same text's head map (sink score, kind on hover) where it was measured; how
    many cells are exact and how many estimated."""
    if not needs.measured.all():
        st.caption(t("kv.heads_stopped", done=int(needs.measured.all(-1).sum()), total=needs.change.shape[0]))
    elif needs.unsettled().any():
        st.caption(t("kv.heads_confirm_stopped", left=int(needs.unsettled().sum())))
    if needs.estimates.any():
        st.caption(t("kv.heads_cells", exact=int((needs.measured & ~needs.estimates).sum()),
                     estimated=int(needs.estimates.sum())))  # fmt: skip
    left, right = st.columns(2)
    charts.show(kv_slides.needs_map(needs, lang=language()), "kv_heads_map", left, on=on)
    if text_heads is not None:
        charts.show(plot.fig_head_map(text_heads, "sink", lang=language()), "kv_heads_kinds", right, on=on)


def heads(request: session.Request) -> None:
    st.subheader(t("kv.heads_heading"))
    st.markdown(t("kv.heads_intro", sinks=kv_evict.SINKS, rise=round(100 * words.NEEDS_CONTEXT)))
    st.markdown(t("kv.heads_estimate_intro", margin=kv_heads.ESTIMATE_MARGIN))
    cells = st.columns(3)
    n_tokens = cells[0].select_slider(t("kv.evict_tokens"), EVICT_TOKENS, value=EVICT_TOKENS[-1], key="kv_h_tokens")
    budget = cells[1].select_slider(t("kv.evict_budget"), BUDGETS, value=BUDGETS[2], key="kv_h_budget")
    how = cells[2].radio(t("kv.heads_how"), list(HOW), format_func=lambda way: t(HOW[way]), key="kv_h_how")
    ids, on = chosen_text(request, n_tokens, "kv_h_text")
    if runnable(t("kv.heads_run"), "kv_heads_run", kv_evict.cache_refusal(len(ids), budget)):
        measure_heads(request, ids, on, budget, how)
    partial = st.session_state.get("kv_heads_partial")
    if partial is not None:  # a run stopped before its policies: the layers it measured
        head_maps(partial, None, None)
        st.markdown(say(kv_heads.said(partial, None)))
        return
    if "kv_heads" not in st.session_state:
        return
    needs, policy, curve, ids, text_heads, on = st.session_state["kv_heads"]
    head_maps(needs, text_heads, on)
    st.markdown(say(kv_heads.said(needs, policy)))
    charts.show(kv_slides.duo_curve(curve, lang=language()), "kv_duo", on=sources.builtin_held_out(len(ids)))


def passkey_rows(request: session.Request, n_tokens: int, budget: int, bits: int) -> list[passkey.PasskeyRow] | None:
    """The passkey table at the length and cache size asked, measured once for every session."""
    loaded = request.loaded

    def run(show: cache.Show) -> list[passkey.PasskeyRow]:
        def progress(rows: list[passkey.PasskeyRow], total: int) -> bool:
            show(len(rows) / total, t("kv.passkey_progress"))
            return True

        return passkey.passkey_table(loaded, n_tokens, budget, bits, progress)

    return measured(request, "kv_passkey", (n_tokens, budget, bits), "kv_passkey_stop", t("kv.passkey_running"), run)


def passkey_check(request: session.Request) -> None:
    """A number stated early, asked at the end: each cache's probability of the answer beside its perplexity."""
    st.subheader(t("kv.passkey_heading"))
    st.markdown(t("kv.passkey_intro", retrieves=words.RETRIEVES))
    cells = st.columns(3)
    n_tokens = cells[0].select_slider(t("kv.evict_tokens"), passkey.LENGTHS, value=passkey.LENGTHS[0], key="kv_pk_n")
    budget = cells[1].select_slider(t("kv.evict_budget"), BUDGETS, value=BUDGETS[1], key="kv_pk_budget")
    bits = cells[2].select_slider(t("kv.bits"), kv_quant.BITS, value=passkey.BITS, key="kv_pk_bits")
    refusal = kv_evict.cache_refusal(n_tokens, budget)  # the pass key text is at most n_tokens long
    if runnable(t("kv.passkey_run"), "kv_passkey_run", refusal):
        st.session_state["kv_passkey"] = (n_tokens, budget, bits, passkey_rows(request, n_tokens, budget, bits))
    if st.session_state.get("kv_passkey", (0, 0, 0, None))[3] is None:
        return
    n_tokens, budget, bits, rows = st.session_state["kv_passkey"]
    names_of = {"dense": lambda _: t("kv.dense"), "evict": lambda c: t(names.POLICY_KEYS[c]),
                "quant": lambda c: t("kv.passkey_quant", bits=bits, kept=t(names.PROTECT_KEYS[c]))}  # fmt: skip
    shown = [{t("kv.col_cache"): names_of[row.kind](row.cache), t("kv.col_passkey"): percent(100 * row.probability),
              t("kv.col_ppl"): row.perplexity, t("kv.col_retrieves"): t("kv.yes") if row.retrieves else t("kv.no")}
             for row in rows]  # fmt: skip
    st.dataframe(local_table(pd.DataFrame(shown), 2), hide_index=True, key="kv_passkey_table")
    st.caption(t("kv.passkey_on", n=n_tokens, budget=budget))
    message = passkey.said(rows, budget)
    if message is not None:
        st.markdown(say(message))


def both(request: session.Request, trace: Trace) -> None:
    quantized(request, trace)
    eviction(request)
    passkey_check(request)
    heads(request)


def page(context: Context) -> None:
    """KV-cache lab: a quantized cache with and without its sinks, eviction policies at one budget, and the heads
    that need the whole context."""
    lessons.lesson(context, ("kv.title", "kv.intro"), both)
