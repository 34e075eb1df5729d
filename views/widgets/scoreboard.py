"""The claims scoreboard as parts: the evidence a scoreboard needs, measured and cached, and its table."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

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


RUN_ORDER = ("streaming", "kv_check", "intact", "removed", "dense", "kv", "sensitivity")  # the server's warm
# checks first (their verdicts land at once), the nudge spread, the slowest, last


def text_runs(request: session.Request, trace: Trace) -> dict[str, cache.Job]:
    """The runs the verdicts need of this text (and the streaming and KV-cache checks, run once per server), by what
    they are, in RUN_ORDER."""
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
    return {name: runs[name] for name in RUN_ORDER if name in runs}


def _pair(found: dict, changed: str) -> tuple | None:
    """(the intact outcome, the changed one), or None where either run failed or has not landed."""
    return None if found.get("intact") is None or found.get(changed) is None else (found["intact"], found[changed])


def run_fields(found: dict) -> dict:
    """The Evidence fields the runs ``found`` so far fill (a missing or failed run is None)."""
    return {"sensitivity": found.get("sensitivity"), "streaming": found.get("streaming"),
            "dense": _pair(found, "dense"), "removed": _pair(found, "removed"), "kv": found.get("kv"),
            "kv_check": found.get("kv_check")}  # fmt: skip


def evidence(trace: Trace) -> claims.Evidence:
    """The scoreboard's evidence before any run of this text: the trace, and the lab's and the cost sweep's shipped
    results."""
    return claims.Evidence(
        trace,
        backcopy=list((lab_training.shipped_runs("backcopy") | lab_training.live_runs("backcopy")).values()),
        polarize=lab_polarization.polarize_runs(POLARIZE_VARIANTS, "logistic", (8, 16), 3000, 0.5, 0),  # the lab's
        cost=st.session_state.get("cost_result") or sink_cost.shipped(),
    )


Landed = Callable[[list[claims.Verdict], set[str]], None]  # (every verdict so far, the claims still to come)


def measured(request: session.Request, trace: Trace, landed: Landed | None = None) -> list[claims.Verdict]:
    """Every verdict: this text's runs in one turn of the model's queue (with a class, the first to ask gets a whole
    scoreboard first); ``landed`` hears the scoreboard at once (what needs no run) and again as each run lands."""
    runs = text_runs(request, trace)
    names, found, said, before = list(runs), {}, set(), evidence(trace)
    unrun = set(RUN_ORDER) - runs.keys()  # runs this text or model does not get: their claims are not measured
    board = lambda: claims.scoreboard(dataclasses.replace(before, **run_fields(found)))  # noqa: E731
    hear = landed or (lambda verdicts, still: None)
    hear(board(), claims.pending(unrun))

    def each(index: int, result: object) -> None:
        found.update(lessons.results_or_none({names[index]: result}, said))
        hear(board(), claims.pending(unrun | found.keys()))

    jobs.run_all(list(runs.values()), t("claims.measuring"), on_each=each)
    return board()


def shown(request: session.Request, trace: Trace, columns: tuple[str, ...] = (),
          keep: bool = True) -> list[claims.Verdict]:  # fmt: skip
    """The scoreboard drawn as its verdicts land (the ones still to come say so), in ``columns`` (all by default);
    without ``keep`` the table goes once every verdict is in (a page that shows them its own way)."""
    slot = st.empty()

    def landed(verdicts: list[claims.Verdict], still: set[str]) -> None:
        with slot.container():
            table(verdicts, columns or tuple(COLUMNS), still)

    verdicts = measured(request, trace, landed)
    if not keep:
        slot.empty()
    return verdicts


def verdict_cell(verdict: claims.Verdict) -> str:
    """The verdict, and for partly or differs the sentence of why."""
    return t(STATUS_KEYS[verdict.status]) + (f" — {say(verdict.why)}" if verdict.why is not None else "")


def cells(verdict: claims.Verdict, coming: bool = False) -> dict[str, str]:
    """One claim's row, by column name, in the viewer's language (the page link without its query); a verdict still
    ``coming`` says it is being measured."""
    return {
        "claim": t(SHOWN[verdict.claim][0]),
        "verdict": t("claims.coming") if coming else verdict_cell(verdict),
        "yours": say(verdict.measured) if verdict.measured is not None and not coming else "—",
        "evidence": say(verdict.evidence) if verdict.evidence is not None and not coming else "—",
        "published": t(SHOWN[verdict.claim][1]),
        "page": SHOWN[verdict.claim][2],
    }


def summary(verdicts: list[claims.Verdict]) -> str:
    counts = {status: sum(v.status == status for v in verdicts) for status in claims.STATUSES}
    return t("claims.summary", total=len(verdicts), **counts)


PROJECTED = ("claim", "verdict", "yours")  # what a projector shows of the scoreboard: a row a line or two


def table(verdicts: list[claims.Verdict], shown: tuple[str, ...] = tuple(COLUMNS),
          coming: Collection[str] = ()) -> None:  # fmt: skip
    """One row per claim, the verdict beside the claim, in the ``shown`` columns; a static table, so long cells wrap
    at any width. The links carry this view (language, text, model, head), so the page opens on what was measured
    here. The claims still ``coming`` say so, and the count waits for them."""
    query = url_state.current_query()
    rows = [
        {t(COLUMNS[name]): f"[{t('claims.open')}](/{value}?{query})" if name == "page" else value
         for name, value in cells(v, v.claim in coming).items() if name in shown}
        for v in verdicts
    ]  # fmt: skip
    st.table(pd.DataFrame(rows).set_index(t(COLUMNS["claim"])))
    if not coming:
        st.markdown(summary(verdicts))
