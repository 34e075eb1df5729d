"""Training lab: watch softmax polarize, and sinks emerge while a tiny transformer trains."""

from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import lab, plot

from views import common, url_state
from views.text import language, num, t

RUNS = Path(__file__).resolve().parent.parent / "assets" / "lab"


def polarize_runs(
    variants: tuple[str, ...], loss: str, shape: tuple[int, int], steps: int, lr: float, seed: int
) -> dict:
    """Every chosen variant trained once, shared by every session through the lab's run queue and cache."""
    candidates, dim = shape

    def run() -> dict:
        return {
            v: lab.polarize(v, loss, candidates=candidates, dim=dim, steps=steps, lr=lr, seed=seed) for v in variants
        }

    return common.run_once("lab", ("polarize", variants, loss, shape, steps, lr, seed), run, t("lab.training"))


def step_choices(choices: list[int]) -> list[int]:
    """The training lengths this deployment allows (hosted mode caps them)."""
    allowed = [steps for steps in choices if steps <= common.shared().settings.max_lab_steps]
    return allowed or choices[:1]


def polarization() -> None:
    st.header(t("lab.polarize_title"))
    st.markdown(t("lab.polarize_intro"))
    with st.form("polarize"):
        cols = st.columns(4)
        loss = cols[0].radio(t("lab.loss"), ["logistic", "square"], key="lab_loss")
        candidates = cols[1].slider(t("lab.candidates"), 2, 32, 8, key="lab_candidates")
        steps_allowed = step_choices([300, 1000, 3000, 10000])
        steps = cols[2].select_slider(t("lab.steps"), steps_allowed, min(3000, steps_allowed[-1]), key="lab_steps")
        lr = cols[3].select_slider(t("lab.lr"), [0.05, 0.1, 0.2, 0.5, 1.0], 0.5, key="lab_lr")
        seed = cols[0].number_input(t("lab.seed"), 0, 10_000, 0, key="lab_seed")
        dim = cols[1].slider(t("lab.dim"), 2, 64, 16, key="lab_dim")
        variants = st.multiselect(t("lab.attention"), lab.VARIANTS, list(lab.VARIANTS), key="lab_variants")
        st.form_submit_button(t("lab.train"))
    runs = polarize_runs(tuple(variants), loss, (candidates, dim), steps, lr, int(seed))
    if not runs:
        return
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
    left.plotly_chart(entropy, key="lab_entropy")
    right.plotly_chart(ratio, key="lab_ratio")
    shown = st.selectbox(t("lab.trajectories"), list(runs), key="lab_trajectory")
    run = runs[shown]
    weights = np.array(run.weights)  # (recorded step, candidate)
    coords = {f"σ(a)[{i}]": weights[:, i].tolist() for i in range(weights.shape[1])}
    singular = np.array(run.singular_values)  # (recorded step, singular value)
    svs = {f"s{i + 1}": singular[:, i].tolist() for i in range(min(3, singular.shape[1]))}
    left, right = st.columns(2)
    left.plotly_chart(
        plot.fig_lines(
            run.steps, coords, t("lab.weights_title", variant=shown), t("lab.step_log"), t("lab.weight"), log_x=True
        ),
        key="lab_coords",
    )
    right.plotly_chart(
        plot.fig_lines(
            run.steps,
            svs,
            t("lab.svd_title", variant=shown),
            t("lab.step_log"),
            t("lab.singular_value"),
            log_x=True,
        ),
        key="lab_svd",
    )
    summary = ", ".join(f"{v} {num(r.entropy[0], '.2f')} → {num(r.entropy[-1], '.2f')}" for v, r in runs.items())
    st.caption(t("lab.polarize_summary", summary=summary) + " " + t("lab.citation"))


@st.cache_data(show_spinner=False)
def saved_runs() -> dict[str, lab.InductionRun]:
    return {p.stem: lab.InductionRun.load(p) for p in sorted(RUNS.glob("*.json"))}


def retrain() -> None:
    with st.form("induction"):
        cols = st.columns(3)
        variant = cols[0].selectbox(t("lab.attention"), lab.TRANSFORMER_VARIANTS, key="ind_variant")
        steps_allowed = step_choices([200, 500, 1000, 2000, 3000])
        steps = cols[1].select_slider(t("lab.steps"), steps_allowed, min(2000, steps_allowed[-1]), key="ind_steps")
        seed = cols[2].number_input(t("lab.seed"), 0, 10_000, 0, key="ind_seed")
        go = st.form_submit_button(t("lab.retrain"))
    if go:
        bar = st.progress(0.0)

        def report(step: int, total: int) -> bool:
            if step % 25 == 0:  # a bar update per step would flood the browser
                bar.progress(step / total, text=t("lab.retrain_progress", variant=variant, step=step, total=total))
            return True

        train = lambda: lab.train_induction(variant, steps=steps, seed=int(seed), progress=report)  # noqa: E731
        run = common.run_once("lab", ("induction", variant, steps, int(seed)), train, t("lab.training"))
        bar.empty()
        st.session_state.setdefault("induction_runs", {})[variant] = run


def induction() -> None:
    st.header(t("lab.induction_title"))
    st.markdown(t("lab.induction_intro"))
    retrain()
    runs = saved_runs() | st.session_state.get("induction_runs", {})
    if not runs:
        st.info(t("lab.no_runs"))
        return
    steps = {v: r.steps for v, r in runs.items()}
    left, right = st.columns(2)
    left.plotly_chart(
        plot.fig_lines(steps, {v: r.loss for v, r in runs.items()}, t("lab.loss"), t("lab.step"), t("lab.ce")),
        key="ind_loss",
    )
    right.plotly_chart(
        plot.fig_lines(
            steps, {v: r.accuracy for v, r in runs.items()}, t("lab.accuracy_title"), t("lab.step"), t("lab.accuracy")
        ),
        key="ind_acc",
    )
    shown = st.selectbox(t("lab.run"), list(runs), key="ind_shown")
    run = runs[shown]
    bos = np.array(run.bos_attention)  # (checkpoint, layer, head)
    per_head = {f"L{layer}H{head}": bos[:, layer, head].tolist() for layer, head in np.ndindex(bos.shape[1:])}
    st.plotly_chart(
        plot.fig_lines(run.steps, per_head, t("lab.bos_title", variant=shown), t("lab.step"), t("lab.bos_axis")),
        key="ind_bos",
    )
    checkpoint = st.select_slider(t("lab.checkpoint"), run.steps, run.steps[-1], key="ind_checkpoint")
    maps = np.array(run.maps[run.steps.index(checkpoint)])  # (layer, head, query, key)
    title = t("lab.maps_title", step=checkpoint)
    st.plotly_chart(plot.fig_thumbnails(maps, t("fig.layer"), title, lang=language()), key="ind_maps")
    end_state(runs)


def end_state(runs: dict[str, lab.InductionRun]) -> None:
    rows = [
        {
            t("lab.col_attention"): v,
            t("lab.col_steps"): r.steps[-1],
            t("lab.col_accuracy"): r.accuracy[-1],
            t("lab.col_sink_rate"): r.sink_rate(),
            t("lab.col_max_bos"): float(np.max(r.bos_attention[-1])),
        }
        for v, r in runs.items()
    ]
    st.dataframe(common.local_table(pd.DataFrame(rows), 3), hide_index=True, key="ind_table")
    per_head = {v: np.array(r.bos_attention[-1]).ravel() for v, r in runs.items()}  # (layer * head,)
    shape = np.array(next(iter(runs.values())).bos_attention[-1]).shape
    index = [t("lab.head_index", layer=layer, head=head) for layer, head in np.ndindex(shape)]
    st.caption(t("lab.final_bos"))
    st.dataframe(common.local_table(pd.DataFrame(per_head, index=index), 3), key="ind_heads")
    rates = {v: r.sink_rate() for v, r in runs.items()}
    reproduced = rates.get("softmax", 0) > max(rates.get("sigmoid", 0), rates.get("linear", 0))
    listed = ", ".join(f"{v} {num(rate, '.0f')}%" for v, rate in rates.items())
    st.markdown(t("lab.verdict_yes" if reproduced else "lab.verdict_no", rates=listed))
    st.caption(t("lab.citation"))


def page() -> None:
    """Training lab: watch softmax polarize, and sinks emerge while a tiny transformer trains."""
    st.title(t("lab.title"))
    common.sidebar()  # the shared sidebar stays drawn, so its text and choices survive a visit here
    polarization()
    induction()
    url_state.sync_url()


if __name__ == "__main__":  # Streamlit runs a page file as __main__; importing it runs nothing
    page()
