"""Why a sink is cheaper than a diagonal: our own measurement of the query-key norm each one needs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from sinkscope import plot
from sinkscope.experiments import cost
from sinkscope.findings import sources

from views.state import cache, session
from views.text import local_table, num, say, t
from views.widgets import charts, jobs
from views.widgets.sliders import decimal_slider

SHIPPED = session.ASSETS / "cost.json"
PUBLISHED = {"sink": 1.0, "diagonal": 1.5}  # Súkeník et al.: norm ~ T for a sink, ~ T^1.5 for a diagonal
PATTERN_KEYS = {"sink": "cost.sink", "diagonal": "cost.diagonal"}


@st.cache_data(show_spinner=False)
def shipped() -> dict:
    """The sweep made by ``sinkscope cost --json assets/cost.json`` (d 32, delta 0.1, seed 0, T up to 1024)."""
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def live(dim: int, delta: float, seed: int, max_length: int) -> dict:
    """The same sweep for other controls, shared through the lab's queue and cache."""

    def run() -> dict:
        return cost.report(dim=dim, delta=delta, seed=seed, longest=max_length)

    return jobs.run(cache.Job("lab", ("cost", dim, delta, seed, max_length), cache.one_step(run)), t("cost.measuring"))


def controls() -> dict:
    with st.form("cost_form"):
        cols = st.columns(4)
        dim = cols[0].select_slider("d", [8, 16, 32, 64], 32, key="cost_dim")
        delta = decimal_slider(cols[1], "δ", [0.01, 0.05, 0.1, 0.2], 0.1, "cost_delta")
        seed = cols[2].number_input(t("lab.seed"), 0, 1000, 0, key="cost_seed")
        longest = cols[3].select_slider(t("cost.longest"), [64, 128, 256, 512], 256, key="cost_longest")
        go = st.form_submit_button(t("cost.run"))
    if go:
        st.session_state["cost_result"] = live(dim, delta, int(seed), longest)
    return st.session_state.get("cost_result") or shipped()


def chart(result: dict) -> go.Figure:
    """Each pattern's smallest norm against T, per embedding geometry (log-log)."""
    lengths, norms = {}, {}
    for point in result["points"]:
        name = t(
            "cost.line", pattern=t(PATTERN_KEYS[point["pattern"]]), geometry=t(cost.GEOMETRY_KEYS[point["geometry"]])
        )
        lengths.setdefault(name, []).append(point["n_tokens"])
        norms.setdefault(name, []).append(point["norm"] if point["norm"] is not None else np.nan)
    title = t("cost.title", dim=result["dim"], delta=num(result["delta"], "g"))
    return plot.fig_lines(lengths, norms, title, "T", "‖W‖_F", log_x=True, log_y=True)


def slopes(result: dict) -> None:
    rows = []
    for name, slope in result["slopes"].items():
        geometry, pattern = name.split("/")
        rows.append({
            t("cost.col_pattern"): t(PATTERN_KEYS[pattern]), t("cost.col_geometry"): t(cost.GEOMETRY_KEYS[geometry]),
            t("cost.col_slope"): slope if slope is not None else np.nan, t("cost.col_paper"): PUBLISHED[pattern],
        })  # fmt: skip
    st.dataframe(local_table(pd.DataFrame(rows), 2), hide_index=True, key="cost_slopes")


def section() -> dict:
    """The section; returns the sweep shown (shipped, or the user's own)."""
    st.subheader(t("cost.heading"))
    st.markdown(t("cost.intro"))
    result = controls()
    charts.show(chart(result), "cost_chart", on=sources.synthetic(result["dim"]))
    slopes(result)
    for sentence in cost.explanation(result):
        st.markdown(say(sentence))
    st.caption(t("cost.differs"))
    return result
