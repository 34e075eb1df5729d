"""What the five why-sinks pages share: cached interventions, the paper-vs-your-model table, comparisons."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from backend import figures, interventions
from backend.capture import Trace
from backend.errors import SinkscopeError
from backend.geometry import key_geometry
from backend.interventions import Intervention, Outcome
from views import common


def analysis() -> common.Analysis | None:
    """The sidebar and the analysis of its text (or the previous one after an error)."""
    return common.current_analysis(common.sidebar())


def cached(request: common.Request, what: str, args: tuple, run: Callable[[], Any], message: str) -> Any:
    """A lesson result cached by value for every session, computed in the model's queue."""
    key = (request.model, request.dtype, what, *args)
    return common.run_once(common.shared().lessons, key, run, message)


def outcome(request: common.Request, ids: tuple[int, ...], change: Intervention | None) -> Outcome:
    loaded = common.get_model(request.model, request.dtype)
    run = lambda: interventions.run(loaded, ids, change)  # noqa: E731
    message = "Running the model intact…" if change is None else f"Running the model with {change.label}…"
    return cached(request, "outcome", (ids, change), run, message)


def geometry(request: common.Request, ids: tuple[int, ...]) -> dict[str, np.ndarray]:
    loaded = common.get_model(request.model, request.dtype)
    return cached(request, "geometry", (ids,), lambda: key_geometry(loaded, ids), "Reading keys and queries…")


def attempt(run: Callable[[], Any]) -> Any | None:
    """``run()``, or None after showing why it could not run; the page and earlier results stay."""
    try:
        return run()
    except (SinkscopeError, RuntimeError, MemoryError) as err:
        st.error(str(err) if isinstance(err, SinkscopeError) else f"The model could not run: {err}")
        return None


def remembered(name: str, trace: Trace) -> Intervention | None:
    """The intervention this page last ran on this very text, if any."""
    found = st.session_state.get(name)
    return found[1] if found is not None and found[0] == trace.token_ids else None


def remember(name: str, trace: Trace, change: Intervention) -> None:
    st.session_state[name] = (trace.token_ids, change)


def layer_range(key: str, n_layers: int, default: tuple[int, int], label: str = "Layers") -> tuple[int, ...]:
    """A two-ended layer slider kept inside this model's range; returns every layer in it."""
    low, high = st.session_state.setdefault(key, default)
    st.session_state[key] = (min(low, n_layers - 1), min(high, n_layers - 1))
    low, high = st.slider(label, 0, n_layers - 1, key=key)
    return tuple(range(low, high + 1))


def paper_table(rows: list[tuple[str, str, str]], source: str) -> None:
    """The published figure beside the same measurement on the user's model."""
    table = pd.DataFrame(rows, columns=["measurement", "published", "your model"])
    st.dataframe(table, hide_index=True, width="stretch")
    st.caption(f"Published numbers: {source}. Small models show the same shape, not the same values.")


def top_text(outcome: Outcome) -> str:
    return "  ".join(f"{token} {p:.0%}" for token, p in outcome.top)


def comparison(intact: Outcome, changed: list[Outcome], key: str) -> None:
    """Loss, top predictions and sink scores of each changed run against the intact one."""
    rows = [
        {
            "run": o.label,
            "loss (nats/token)": round(o.loss, 3),
            "change": round(o.loss - intact.loss, 3),
            "perplexity": round(float(np.exp(o.loss)), 2),
            "mean sink": round(float(np.nanmean(o.heads["sink"])), 3),
            "likeliest next tokens": top_text(o),
        }
        for o in [intact, *changed]
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key=f"{key}_table")
    layers = list(range(intact.heads["sink"].shape[0]))
    series = {o.label: np.nanmean(o.heads["sink"], 1).tolist() for o in [intact, *changed]}
    fig = figures.fig_lines(layers, series, "Mean attention to the first token per layer", "layer", "sink")
    st.plotly_chart(fig, key=f"{key}_sinks")
