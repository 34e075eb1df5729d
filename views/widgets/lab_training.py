"""The lab's second part: tiny transformers trained on tasks with dormant queries, shipped runs and live ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from sinkscope import plot
from sinkscope.core.i18n import Text
from sinkscope.core.names import LAB_TASKS, TASK_VARIANTS
from sinkscope.findings import sources
from sinkscope.lab import toy

from views.state import cache, session
from views.text import language, local_table, num, t, variant_label
from views.widgets import charts, jobs

RUNS = session.ASSETS / "lab"
TASK_KEYS = {"backcopy": "lab.task_backcopy", "induction": "lab.task_induction"}
ABOUT_KEYS = {"backcopy": "lab.about_backcopy", "induction": "lab.about_induction"}
CLAIM_KEYS = {
    "sink": "lab.claim_sink", "withhold": "lab.claim_withhold", "switch_off": "lab.claim_switch_off",
    "learned": "lab.claim_learned", "gate": "lab.claim_gate",
}  # fmt: skip
Runs = dict[tuple[str, int], toy.TrainingRun]  # (variant, seed) -> run


@st.cache_data(show_spinner=False)
def shipped_runs(task: str) -> Runs:
    """The runs in assets/lab/<task>/ (made by the command in the README)."""
    runs = [toy.TrainingRun.load(path) for path in (RUNS / task).glob("*.json")]
    runs.sort(key=lambda run: (TASK_VARIANTS.index(run.variant), run.seed))  # softmax first: the story starts there
    return {(run.variant, run.seed): run for run in runs}


def live_runs(task: str) -> Runs:
    """The runs this session trained on ``task``."""
    return {(v, s): run for (name, v, s), run in st.session_state.get("lab_runs", {}).items() if name == task}


def retrain(task: str) -> None:
    """A form that trains one variant live (progress, Stop), shared through the lab's queue and cache."""
    with st.form(f"train_{task}"):
        cols = st.columns(3)
        variant = cols[0].selectbox(t("lab.attention"), TASK_VARIANTS, key="train_variant",
                                   format_func=Text(language()).variant)  # fmt: skip
        seed = cols[1].number_input(t("lab.seed"), 0, 10_000, 0, key="train_seed")
        allowed = cache.step_choices([250, 500, 1000, 2000])
        steps = cols[2].select_slider(t("lab.steps"), allowed, value=allowed[-1], key="train_steps")
        go = st.form_submit_button(t("lab.retrain"))
    if not go:
        return

    def train(show: cache.Show) -> toy.TrainingRun:
        def report(step: int, total: int) -> bool:
            show(step / total, t("lab.retrain_progress", variant=variant_label(variant), step=step, total=total))
            return True

        return toy.train(task, variant, steps=steps, seed=int(seed), progress=report)

    job = cache.Job("lab", ("train", task, variant, steps, int(seed)), train)
    run = jobs.run(job, t("lab.training_live"), stop=("stop_training", "lab.stop_help"))
    st.session_state.setdefault("lab_runs", {})[(task, variant, int(seed))] = run


def table(runs: Runs) -> None:
    """One row per run: the head that parks most on BOS at dormant queries, with the row's total weight and, for
    the built-in sinks, where the rest of its dormant mass went (the learned logit, or a closed gate)."""
    rows = []
    for (variant, seed), run in runs.items():
        bos = run.final("bos_dormant")
        top = np.unravel_index(bos.argmax(), bos.shape)  # (layer, head)
        first = run.first_sink_step()
        rows.append({
            t("lab.col_attention"): variant_label(variant), t("lab.col_seed"): seed, t("lab.col_loss"): run.loss[-1],
            t("lab.col_accuracy"): run.accuracy[-1], t("lab.col_head"): f"L{top[0]}H{top[1]}",
            t("lab.col_bos_dormant"): bos[top], t("lab.col_bos_active"): run.final("bos_active")[top],
            t("lab.col_total_dormant"): run.final("total_dormant")[top],
            t("lab.col_where"): where_it_went(run, top),
            t("lab.col_first", sink=toy.SINK): str(first) if first is not None else "—",
        })  # fmt: skip
    st.table(local_table(pd.DataFrame(rows).set_index(t("lab.col_attention")), 3))  # headers wrap
    st.caption(t("lab.table_help"))


def where_it_went(run: toy.TrainingRun, head: tuple[int, ...]) -> str:
    """A built-in sink's dormant mass: what the learned logit took, or the gate left open; "—" for the others."""
    if run.variant == "sink-logit":
        return t("lab.where_learned", share=num(1 - float(run.final("total_dormant")[head])))
    if run.variant == "gated" and run.gate_dormant:
        return t("lab.where_gate", gate=num(float(run.final("gate_dormant")[head])))
    return "—"


def verdicts(runs: Runs) -> None:
    unlearned = [(variant, seed, run) for (variant, seed), run in sorted(runs.items()) if not run.learned()]
    if unlearned:
        said = ", ".join(
            t("lab.run_accuracy", variant=variant_label(v), seed=s, accuracy=num(r.accuracy[-1], ".2f"))
            for v, s, r in unlearned
        )
        st.markdown(t("lab.not_learned", runs=said, threshold=num(toy.LEARNED, ".1f")))
    for found in toy.findings(list(runs.values())):
        verdict = t("lab.reproduces" if found.holds else "lab.differs")
        where = {} if found.where is None else {"where": num(found.where)}
        seed, layer, head = found.source  # the table's columns are each run's head that parks most on BOS
        value = t("lab.value_at", value=num(found.value), head=f"L{layer}H{head}", seed=seed)
        st.markdown(t(CLAIM_KEYS[found.claim], value=value, verdict=verdict, sink=toy.SINK, silent=toy.SILENT, **where))
        if found.claim == "withhold":
            transient(runs)
    st.caption(t("lab.sources"))


def transient(runs: Runs) -> None:
    """Softmax+1 runs that park on BOS before they learn to withhold: the verdict reads only their last step."""
    for (variant, seed), run in sorted(runs.items()):
        went = run.transient_sink() if variant == "softmax+1" else None
        if went is not None:
            peak, step, released = went
            st.markdown(
                t(
                    "lab.transient_sink",
                    seed=seed,
                    peak=num(peak, ".2f"),
                    step=step,
                    released=released,
                    silent=toy.SILENT,
                )
            )


def bos_figure(run: toy.TrainingRun) -> go.Figure:
    """A run's heads over training: BOS weight at dormant and at active queries, and the row's total weight."""
    series = {}
    for name, key in (("bos_dormant", "lab.line_dormant"), ("bos_active", "lab.line_active"),
                      ("total_dormant", "lab.line_total")):  # fmt: skip
        values = np.array(getattr(run, name))  # (checkpoint, layer, head)
        for layer, head in np.ndindex(values.shape[1:]):
            series[t(key, head=f"L{layer}H{head}")] = values[:, layer, head].tolist()
    if run.variant == "gated" and run.gate_dormant:
        gates = np.array(run.gate_dormant)  # (checkpoint, layer, head)
        for layer, head in np.ndindex(gates.shape[1:]):
            series[t("lab.line_gate", head=f"L{layer}H{head}")] = gates[:, layer, head].tolist()
    axis = t("lab.share_axis" if run.variant in toy.ROW_SUMS_TO_ONE else "lab.raw_axis")
    return plot.fig_lines(
        run.steps, series, t("lab.bos_title", variant=variant_label(run.variant)), t("lab.step"), axis
    )


def one_run(runs: Runs) -> None:
    """The chosen run over training, and its maps at a checkpoint."""
    choices = list(runs)
    default = choices.index(("softmax", 0)) if ("softmax", 0) in choices else 0
    tr = Text(language())  # bound now: the widget formats its options again outside this run
    named = lambda run: tr("lab.run_name", variant=tr.variant(run[0]), seed=run[1])  # noqa: E731
    variant, seed = st.selectbox(t("lab.run"), choices, index=default, key="train_shown", format_func=named)
    run = runs[(variant, seed)]
    charts.show(bos_figure(run), "train_bos")
    step = st.select_slider(t("lab.checkpoint"), run.map_steps, run.map_steps[-1], key="train_checkpoint")
    maps = np.array(run.maps[run.map_steps.index(step)])  # (layer, head, query, key)
    title = t("lab.maps_title", step=step)
    charts.show(plot.fig_thumbnails(maps, t("fig.layer"), title, lang=language()), "train_maps")


def section() -> None:
    st.header(t("lab.sinks_title"))
    st.markdown(t("lab.sinks_intro"))
    task = st.radio(t("lab.task"), LAB_TASKS, format_func=lambda name: t(TASK_KEYS[name]), horizontal=True,
                    key="lab_task")  # fmt: skip
    st.caption(t(ABOUT_KEYS[task]))
    retrain(task)
    runs = shipped_runs(task) | live_runs(task)
    if not runs:
        st.info(t("lab.no_runs"))
        return
    charts.computed_on(sources.lab_runs(len(runs)))
    table(runs)
    verdicts(runs)
    one_run(runs)
