"""What the five why-sinks pages share: cached interventions, the paper-vs-your-model table, comparisons."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core.capture import Trace
from sinkscope.core.errors import SinkscopeError
from sinkscope.experiments import interventions, nudges
from sinkscope.experiments.geometry import key_geometry
from sinkscope.experiments.interventions import Intervention, Outcome

from views.frame import Context
from views.state import cache, session, url_state
from views.text import local_table, num, percent, say, t
from views.widgets import charts, jobs


def lesson(
    context: Context, keys: tuple[str, str], body: Callable[[session.Request, Trace], None],
    before: Callable[[], None] | None = None,
) -> None:  # fmt: skip
    """A why-sinks page: its title and intro (catalogue keys), ``before()`` (what needs no model), then
    ``body`` on the sidebar's analysis, and the URL kept in sync."""
    st.title(t(keys[0]))
    st.markdown(t(keys[1]))
    if before is not None:
        before()
    analysis = context.analysis()
    if analysis is not None:
        body(analysis.request, analysis.trace)
    url_state.sync_url()


def job(request: session.Request, what: str, args: tuple, run: Callable[[], Any]) -> cache.Job:
    """A lesson result cached by value for every session, computed in the model's queue."""
    return cache.Job(request.model, (what, request.dtype, *args), cache.one_step(run))


def cached(request: session.Request, what: str, args: tuple, run: Callable[[], Any], message: str) -> Any:
    return jobs.run(job(request, what, args, run), message)


def outcome_job(request: session.Request, ids: tuple[int, ...], change: Intervention | None) -> cache.Job:
    loaded = request.loaded
    return job(request, "outcome", (ids, change), lambda: interventions.outcome(loaded, ids, change))


def outcome(request: session.Request, ids: tuple[int, ...], change: Intervention | None) -> Outcome:
    message = t("lesson.running_intact") if change is None else t("lesson.running_with", change=say(change.message))
    return jobs.run(outcome_job(request, ids, change), message)


def sensitivity(request: session.Request, ids: tuple[int, ...], position: int, size: float) -> dict[int, float]:
    """Mean KL of the predictions after nudging token 0 and token ``position`` by ``size`` x the median h^0 norm."""
    loaded = request.loaded

    def run() -> dict[int, float]:
        scale = interventions.embedding_scale(loaded, ids)
        return interventions.sensitivity(loaded, ids, [0, position], size * scale)

    return cached(request, "sensitivity", (ids, position, size), run, t("break.perturbing"))


def spread_job(request: session.Request, ids: tuple[int, ...], size: float) -> cache.Job:
    """Token 0's nudge against other tokens' over many random directions and three positions."""
    loaded = request.loaded

    def run() -> nudges.Spread:
        return nudges.sensitivity_spread(loaded, ids, size * interventions.embedding_scale(loaded, ids))

    return job(request, "sensitivity_spread", (ids, size), run)


def sensitivity_spread(request: session.Request, ids: tuple[int, ...], size: float) -> nudges.Spread:
    return jobs.run(spread_job(request, ids, size), t("break.perturbing"))


def geometry(request: session.Request, ids: tuple[int, ...]) -> dict[str, np.ndarray]:
    loaded = request.loaded
    return cached(request, "geometry", (ids,), lambda: key_geometry(loaded, ids), t("lesson.reading_keys"))


SHOWN_ERRORS = (SinkscopeError, RuntimeError, MemoryError)  # what a run may fail with and the page explains


def attempt(run: Callable[[], Any]) -> Any | None:
    """``run()``, or None after showing why it could not run; the page and earlier results stay."""
    try:
        return run()
    except SHOWN_ERRORS as err:
        return failed(err)


def failed(err: Exception) -> None:
    """Say on the page why a run failed (and return None in its place); an error nobody expects is raised."""
    if not isinstance(err, SHOWN_ERRORS):
        raise err
    st.error(say(err) if isinstance(err, SinkscopeError) else t("common.model_failed", error=err))


def results_or_none(found: dict[str, Any], said: set[str] | None = None) -> dict[str, Any]:
    """Results of ``jobs.run_all`` by name, each failed run's None, after saying each distinct failure once (a
    model that refuses interventions fails every run the same way); ``said`` carries what was said across calls."""
    said = set() if said is None else said
    for err in (value for value in found.values() if isinstance(value, Exception)):
        if repr(err) not in said:
            said.add(repr(err))
            failed(err)
    return {name: None if isinstance(value, Exception) else value for name, value in found.items()}


def remembered(name: str, trace: Trace) -> Intervention | None:
    """The intervention this page last ran on this very text, if any."""
    found = st.session_state.get(name)
    return found[1] if found is not None and found[0] == trace.token_ids else None


def remember(name: str, trace: Trace, change: Intervention) -> None:
    st.session_state[name] = (trace.token_ids, change)


def layer_range(key: str, n_layers: int, default: tuple[int, int]) -> tuple[int, ...]:
    """A two-ended layer slider kept inside this model's range; returns every layer in it."""
    low, high = st.session_state.setdefault(key, default)
    st.session_state[key] = (min(low, n_layers - 1), min(high, n_layers - 1))
    low, high = st.slider(t("lesson.layers"), 0, n_layers - 1, key=key)
    return tuple(range(low, high + 1))


def paper_table(rows: list[tuple[str, str, str]], source: str) -> None:
    """The published figure beside the same measurement on the user's model."""
    columns = [t("lesson.col_measurement"), t("lesson.col_published"), t("lesson.col_yours")]
    st.table(pd.DataFrame(rows, columns=columns).set_index(columns[0]))  # a static table wraps long cells
    st.caption(t("lesson.published_note", source=source))


def top_text(outcome: Outcome) -> str:
    return "  ".join(f"{token} {percent(100 * p, '.0f')}" for token, p in outcome.top)


def comparison(intact: Outcome, changed: list[tuple[Intervention, Outcome]], key: str) -> None:
    """Loss, top predictions and sink scores of each changed run against the intact one.

    Labels come from the interventions, not the cached outcomes, so they follow the viewer's language.
    """
    runs = [(t("lesson.intact"), intact)] + [(say(change.message), found) for change, found in changed]
    rows = [
        {
            t("lesson.col_run"): label,
            t("lesson.col_loss"): round(o.loss, 3),
            t("lesson.col_change"): round(o.loss - intact.loss, 3),
            t("lesson.col_ppl"): round(o.perplexity, 2),
            t("lesson.col_sink"): round(float(np.nanmean(o.heads["sink"])), 3),
            t("lesson.col_top"): top_text(o),
        }
        for label, o in runs
    ]
    st.dataframe(local_table(pd.DataFrame(rows), 3), hide_index=True, width="stretch", key=f"{key}_table")
    layers = list(range(intact.heads["sink"].shape[0]))
    series = {label: np.nanmean(o.heads["sink"], 1).tolist() for label, o in runs}
    fig = plot.fig_lines(layers, series, t("lesson.sinks_title"), t("fig.layer"), "sink")
    charts.show(fig, f"{key}_sinks")


def ppl_change(intact: Outcome, changed: Outcome) -> str:
    """'12.34 → 56.78', in the language's number format."""
    return f"{num(intact.perplexity, '.2f')} → {num(changed.perplexity, '.2f')}"
