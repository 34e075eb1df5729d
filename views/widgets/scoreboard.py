"""The claims scoreboard as parts: the evidence a scoreboard needs, measured and cached, and its table."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import Trace
from sinkscope.core.names import POLARIZE_VARIANTS, STATUS_KEYS
from sinkscope.experiments import claims, interventions, kv_quant, stream_plan

from views.state import cache, session, url_state
from views.text import say, t
from views.widgets import jobs, lab_polarization, lab_training, lessons, sink_cost

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
    "secondary_sinks": ("claims.secondary_sinks", "claims.secondary_sinks.published", "origins"),
    "sink_built_early": ("claims.sink_built_early", "claims.sink_built_early.published", "origins"),
    "mlp_lifetime": ("claims.mlp_lifetime", "claims.mlp_lifetime.published", "origins"),
    "kv_sinks": ("claims.kv_sinks", "claims.kv_sinks.published", "kv"),
    "h2o_first": ("claims.h2o_first", "claims.h2o_first.published", "kv"),
    "heads_stream": ("claims.heads_stream", "claims.heads_stream.published", "kv"),
}
COLUMNS = {
    "claim": "claims.col_claim", "verdict": "claims.col_verdict", "yours": "claims.col_yours",
    "evidence": "claims.col_evidence", "published": "claims.col_published", "page": "claims.col_page",
}  # fmt: skip


def streaming_check_job(request: session.Request) -> cache.Job:
    """Dense, window and sinks + window perplexity of ``stream_plan.CHECK``, cached for every session (the warm
    start runs it for the default model)."""
    return cache.streaming_check_job(request.loaded, request.model, request.dtype)


def streaming_check(request: session.Request) -> dict[str, float]:
    return jobs.run(streaming_check_job(request), t("claims.measuring_streaming", **stream_plan.check_values()))


def kv_claim_job(request: session.Request, trace: Trace) -> cache.Job:
    """The text's quantized caches with nothing and with the sinks kept (``kv_quant.claim_runs``), which the
    scoreboard and the course's KV step both read."""
    loaded = request.loaded
    return lessons.job(request, "kv_claim", (trace.token_ids,), lambda: kv_quant.claim_runs(loaded, trace))


def text_runs(request: session.Request, trace: Trace) -> dict[str, cache.Job]:
    """The runs the verdicts need of this text (and the streaming and KV-cache checks, run once per server), by what
    they are."""
    layers, ids = tuple(range(trace.shape[0])), trace.token_ids
    every = interventions.heads_of_kind(trace.heads["kind"], "all", layers)
    runs = {
        "intact": lessons.outcome_job(request, ids, None),
        "dense": lessons.outcome_job(request, ids, interventions.ForceHeads(every, "uniform")),
        "removed": lessons.outcome_job(request, ids, interventions.default_drop(len(layers))),
        "streaming": streaming_check_job(request),
    }
    if trace.n_tokens > 2:  # a nudge needs a later prediction to move
        runs["sensitivity"] = lessons.spread_job(request, ids, 1.0)
    loaded = request.loaded
    if loaded.refusal(Can.QUANTIZE_KV) is None:  # a cache the quantizer never sees: the claim says "not measured"
        runs["kv"] = kv_claim_job(request, trace)
    kv_job = cache.kv_check_job(loaded, request.model, request.dtype)
    if kv_job is not None:
        runs["kv_check"] = kv_job
    return runs


def _pair(found: dict, changed: str) -> tuple | None:
    """(the intact outcome, the changed one), or None where either run failed."""
    return None if found["intact"] is None or found[changed] is None else (found["intact"], found[changed])


def measured(request: session.Request, trace: Trace) -> list[claims.Verdict]:
    """Everything the verdicts need: this text's runs, in one turn of the model's queue (with a class, the first to
    ask gets a whole scoreboard first), and the lab's and the cost sweep's shipped results."""
    runs = text_runs(request, trace)
    found = lessons.results_or_none(dict(zip(runs, jobs.run_all(list(runs.values()), t("claims.measuring")),
                                             strict=True)))  # fmt: skip
    evidence = claims.Evidence(
        trace,
        backcopy=list((lab_training.shipped_runs("backcopy") | lab_training.live_runs("backcopy")).values()),
        polarize=lab_polarization.polarize_runs(POLARIZE_VARIANTS, "logistic", (8, 16), 3000, 0.5, 0),  # the lab's
        cost=st.session_state.get("cost_result") or sink_cost.shipped(),
        sensitivity=found.get("sensitivity"),
        streaming=found["streaming"],
        dense=_pair(found, "dense"),
        removed=_pair(found, "removed"),
        kv=found.get("kv"),
        kv_check=found.get("kv_check"),
    )
    return claims.scoreboard(evidence)


def verdict_cell(verdict: claims.Verdict) -> str:
    """The verdict, and for partly or differs the sentence of why."""
    return t(STATUS_KEYS[verdict.status]) + (f" — {say(verdict.why)}" if verdict.why is not None else "")


def cells(verdict: claims.Verdict) -> dict[str, str]:
    """One claim's row, by column name, in the viewer's language (the page link without its query)."""
    return {
        "claim": t(SHOWN[verdict.claim][0]),
        "verdict": verdict_cell(verdict),
        "yours": say(verdict.measured) if verdict.measured is not None else "—",
        "evidence": say(verdict.evidence) if verdict.evidence is not None else "—",
        "published": t(SHOWN[verdict.claim][1]),
        "page": SHOWN[verdict.claim][2],
    }


def summary(verdicts: list[claims.Verdict]) -> str:
    counts = {status: sum(v.status == status for v in verdicts) for status in claims.STATUSES}
    return t("claims.summary", total=len(verdicts), **counts)


PROJECTED = ("claim", "verdict", "yours")  # what a projector shows of the scoreboard: a row a line or two


def table(verdicts: list[claims.Verdict], shown: tuple[str, ...] = tuple(COLUMNS)) -> None:
    """One row per claim, the verdict beside the claim, in the ``shown`` columns; a static table, so long cells wrap
    at any width. The links carry this view (language, text, model, head), so the page opens on what was measured
    here."""
    query = url_state.current_query()
    rows = [
        {t(COLUMNS[name]): f"[{t('claims.open')}](/{value}?{query})" if name == "page" else value
         for name, value in cells(v).items() if name in shown}
        for v in verdicts
    ]  # fmt: skip
    st.table(pd.DataFrame(rows).set_index(t(COLUMNS["claim"])))
    st.markdown(summary(verdicts))
