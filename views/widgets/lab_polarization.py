"""The lab's first section: softmax polarizes under gradient descent; shipped runs first, live ones shared."""

import numpy as np
import streamlit as st
from sinkscope import lab, plot
from sinkscope.core.i18n import Text
from sinkscope.core.names import POLARIZE_VARIANTS
from sinkscope.findings import sources

from views.state import cache
from views.text import language, num, t, variant_label
from views.widgets import charts, jobs, lab_training
from views.widgets.sliders import decimal_slider

LOSSES = {"logistic": "lab.loss_logistic", "square": "lab.loss_square"}  # the polarization run's losses


@st.cache_resource(show_spinner=False)
def shipped_polarize() -> list[lab.PolarizeRun]:
    """The runs in assets/lab/polarize/ (made by the command in the README): the page opens on them."""
    return [lab.PolarizeRun.load(path) for path in sorted((lab_training.RUNS / "polarize").glob("*.json"))]


def polarize_runs(
    variants: tuple[str, ...], loss: str, shape: tuple[int, int], steps: int, lr: float, seed: int
) -> dict:
    """Every chosen variant: a shipped run where one has these settings, else trained once and shared by every
    session through the lab's run queue and cache."""
    candidates, dim = shape
    settings = dict(candidates=candidates, dim=dim, steps=steps, lr=lr, seed=seed)
    shipped = {r.variant: r for r in shipped_polarize() if r.loss == loss and r.settings == settings}
    missing = tuple(v for v in variants if v not in shipped)

    def run() -> dict:
        return {v: lab.polarize(v, loss, **settings) for v in missing}

    key = ("polarize", missing, loss, shape, steps, lr, seed)
    live = jobs.run(cache.Job("lab", key, cache.one_step(run)), t("lab.training")) if missing else {}
    return {v: shipped.get(v) or live[v] for v in variants}


def section() -> None:
    st.header(t("lab.polarize_title"))
    st.markdown(t("lab.polarize_intro"))
    charts.computed_on(sources.toy_block())
    with st.form("polarize"):
        cols = st.columns(4)
        loss = cols[0].radio(t("lab.loss"), list(LOSSES), format_func=lambda name: t(LOSSES[name]), key="lab_loss")
        candidates = cols[1].slider(t("lab.candidates"), 2, 32, 8, key="lab_candidates")
        steps_allowed = cache.step_choices([300, 1000, 3000, 10000])
        steps = cols[2].select_slider(t("lab.steps"), steps_allowed, min(3000, steps_allowed[-1]), key="lab_steps")
        lr = decimal_slider(cols[3], t("lab.lr"), [0.05, 0.1, 0.2, 0.5, 1.0], 0.5, "lab_lr")
        seed = cols[0].number_input(t("lab.seed"), 0, 10_000, 0, key="lab_seed")
        dim = cols[1].slider(t("lab.dim"), 2, 64, 16, key="lab_dim")
        variants = st.multiselect(t("lab.attention"), POLARIZE_VARIANTS, list(POLARIZE_VARIANTS), key="lab_variants",
                                  format_func=Text(language()).variant)  # fmt: skip
        st.form_submit_button(t("lab.train"))
    runs = polarize_runs(tuple(variants), loss, (candidates, dim), steps, lr, int(seed))
    if not runs:
        return
    shipped = [v for v, r in runs.items() if any(r is s for s in shipped_polarize())]
    st.caption(
        t("lab.polarize_shipped", variants=", ".join(map(variant_label, shipped)))
        if shipped
        else t("lab.polarize_live")
    )
    steps_of = {v: r.steps for v, r in runs.items()}
    entropy = plot.fig_lines(
        steps_of,
        {v: r.entropy for v, r in runs.items()},
        t("lab.entropy_title"),
        t("lab.step_log"),
        t("lab.entropy_axis"),
        log_x=True,
    )
    one_over_log = {v: [1 / np.log(s + 1) for s in r.steps] for v, r in runs.items()}
    ratio = plot.fig_lines(
        one_over_log,
        {v: r.ratio for v, r in runs.items()},
        t("lab.ratio_title"),
        "1 / log t",
        t("lab.ratio_axis"),
    )
    left, right = st.columns(2)
    charts.show(entropy, "lab_entropy", left)
    charts.show(ratio, "lab_ratio", right)
    shown = st.selectbox(t("lab.trajectories"), list(runs), key="lab_trajectory", format_func=Text(language()).variant)
    run = runs[shown]
    weights = np.array(run.weights)  # (recorded step, candidate)
    coords = {f"σ(a)[{i}]": weights[:, i].tolist() for i in range(weights.shape[1])}
    singular = np.array(run.singular_values)  # (recorded step, singular value)
    svs = {f"s{i + 1}": singular[:, i].tolist() for i in range(min(3, singular.shape[1]))}
    left, right = st.columns(2)
    name = variant_label(shown)
    shown_runs = ((coords, "lab.weights_title", "lab.weight", "lab_coords", left),
                  (svs, "lab.svd_title", "lab.singular_value", "lab_svd", right))  # fmt: skip
    for series, title, axis, key, where in shown_runs:  # each weight's path, and V's singular values
        fig = plot.fig_lines(run.steps, series, t(title, variant=name), t("lab.step_log"), t(axis), log_x=True)
        charts.show(fig, key, where)
    summary = ", ".join(
        f"{variant_label(v)} {num(r.entropy[0], '.2f')} → {num(r.entropy[-1], '.2f')}" for v, r in runs.items()
    )
    st.caption(t("lab.polarize_summary", summary=summary) + " " + t("lab.citation"))
    st.markdown(what_polarized(runs))


def what_polarized(runs: dict[str, lab.PolarizeRun]) -> str:
    """Which variants ended near one-hot in these runs, and why a variant without normalization could."""
    polarized = [v for v, r in runs.items() if r.polarized()]
    flat = [v for v in runs if v not in polarized]
    said = [
        t(
            "lab.polarized_which",
            polarized=", ".join(map(variant_label, polarized)) or "—",
            flat=", ".join(map(variant_label, flat)) or "—",
        )
    ]
    for variant in polarized:
        run = runs[variant]
        if variant not in ("softmax", "softmax+1") and run.dead():  # one-hot without the softmax's coupling
            said.append(
                t("lab.polarized_dead", variant=variant_label(variant), dead=run.dead(), n=len(run.weights[-1]))
            )
    return " ".join(said)
