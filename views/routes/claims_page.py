"""Claims scoreboard: every claim of the papers, the published number, this model's, and a computed verdict."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from sinkscope.core.capture import Trace
from sinkscope.core.names import POLARIZE_VARIANTS
from sinkscope.experiments import claims, interventions, streaming

from views.state import cache, session, url_state
from views.text import say, t
from views.widgets import controls, lab_polarization, lab_training, lessons, sink_cost

SHOWN = {  # claim -> (catalogue key of the claim, of the published figure, the page that measures it)
    "softmax_sink": ("claims.softmax_sink", "claims.softmax_sink.published", "softmax"),
    "value_little": ("claims.value_little", "claims.value_little.published", "reads-nothing"),
    "streaming": ("claims.streaming", "claims.streaming.published", "streaming"),
    "plus_one": ("claims.plus_one", "claims.plus_one.published", "lab"),
    "half_space": ("claims.half_space", "claims.half_space.published", "diagonals"),
    "dense_smooths": ("claims.dense_smooths", "claims.dense_smooths.published", "diagonals"),
    "sink_cheaper": ("claims.sink_cheaper", "claims.sink_cheaper.published", "diagonals"),
    "polarizes": ("claims.polarizes", "claims.polarizes.published", "lab"),
    "sigmoid_flat": ("claims.sigmoid_flat", "claims.sigmoid_flat.published", "lab"),
    "toy_sink": ("claims.toy_sink", "claims.toy_sink.published", "lab"),
    "learned_sink": ("claims.learned_sink", "claims.learned_sink.published", "lab"),
    "gated": ("claims.gated", "claims.gated.published", "lab"),
    "massive_first": ("claims.massive_first", "claims.massive_first.published", "massive"),
    "one_token": ("claims.one_token", "claims.one_token.published", "break"),
}
COLUMNS = {
    "claim": "claims.col_claim", "verdict": "claims.col_verdict", "yours": "claims.col_yours",
    "published": "claims.col_published", "page": "claims.col_page",
}  # fmt: skip
STATUS = {"reproduces": "claims.reproduces", "differs": "claims.differs", "needs_run": "claims.needs_run"}
STREAM = {"tokens": 512, "sinks": 4, "window": 60}  # one-pass mask engines: three forward passes in all


def streaming_check(request: session.Request) -> dict[str, float]:
    """Dense, window and 4 sinks + window perplexity on Python's help text (mask engines: fast, labelled)."""
    loaded = cache.get_model(request.model, request.dtype)
    streaming.rotary_of(loaded.model)  # the same check the streaming page makes: a standard RoPE model

    def run() -> dict[str, float]:
        ids = loaded.tokenizer(streaming.builtin_text(), add_special_tokens=False)["input_ids"][: STREAM["tokens"]]
        methods = {"dense": "dense", "window": "mask-window", "sinks": "mask-sinks"}
        nll = {
            name: streaming.streaming_nll(loaded, ids, m, STREAM["sinks"], STREAM["window"])
            for name, m in methods.items()
        }
        return {name: streaming.perplexity(values) for name, values in nll.items()}

    return lessons.cached(request, "claims_streaming", (), run, t("claims.measuring_streaming"))


def dense_pair(request: session.Request, trace: Trace) -> tuple[interventions.Outcome, interventions.Outcome]:
    """The intact run and the run with every head dense (uniform over its visible keys)."""
    every = interventions.heads_of_kind(trace.heads["kind"], "all", tuple(range(trace.shape[0])))
    dense = interventions.ForceHeads(every, "uniform")
    return lessons.outcome(request, trace.token_ids, None), lessons.outcome(request, trace.token_ids, dense)


def measured(request: session.Request, trace: Trace) -> list[claims.Verdict]:
    """Everything the verdicts need: cheap runs on this text, the lab's and the cost sweep's shipped results."""
    ids, long_enough = trace.token_ids, trace.n_tokens > 2  # a perturbation needs a later prediction to move
    kl = lessons.attempt(lambda: lessons.sensitivity(request, ids, trace.n_tokens // 2, 1.0)) if long_enough else None
    pair = lessons.attempt(lambda: dense_pair(request, trace)) if long_enough else None
    ppl = lessons.attempt(lambda: streaming_check(request))
    backcopy = list((lab_training.shipped_runs("backcopy") | lab_training.live_runs("backcopy")).values())
    # the lab page's default run
    polarize = lab_polarization.polarize_runs(POLARIZE_VARIANTS, "logistic", (8, 16), 3000, 0.5, 0)
    cost = st.session_state.get("cost_result") or sink_cost.shipped()
    return claims.scoreboard(trace, backcopy, polarize, cost, kl, ppl, pair)


def table(verdicts: list[claims.Verdict]) -> None:
    """One row per claim, the verdict beside the claim; a static table, so long cells wrap at any width."""
    columns = {name: t(key) for name, key in COLUMNS.items()}
    rows = [
        {
            columns["claim"]: t(SHOWN[v.claim][0]),
            columns["verdict"]: t(STATUS[v.status]),
            columns["yours"]: say(v.measured) if v.measured is not None else "—",
            columns["published"]: t(SHOWN[v.claim][1]),
            columns["page"]: f"[{t('claims.open')}](/{SHOWN[v.claim][2]})",
        }
        for v in verdicts
    ]
    st.table(pd.DataFrame(rows).set_index(columns["claim"]))
    counts = {status: sum(v.status == status for v in verdicts) for status in STATUS}
    st.markdown(t("claims.summary", reproduces=counts["reproduces"], differs=counts["differs"], total=len(verdicts)))


def page() -> None:
    """Claims scoreboard: each claim measured on the sidebar's model and text, or on the lab's runs."""
    st.title(t("claims.title"))
    st.markdown(t("claims.intro"))
    analysis = cache.current_analysis(controls.sidebar())
    if analysis is not None:
        table(measured(analysis.request, analysis.trace))
        st.caption(t("claims.how"))
    url_state.sync_url()
