"""Lesson 5: break the sink, by removing it, by replacing the first token, or by nudging it."""

import numpy as np
import streamlit as st

from backend import interventions
from backend.capture import Trace
from views import common, lessons, url_state

REPLACEMENTS = {"\n": "a newline ↵", " ": "a space ␣", ".": "a full stop", "random": "a random word", "own": "your own"}


def drop_first(request: common.Request, trace: Trace) -> interventions.Intervention | None:
    n_layers = trace.shape[0]
    with st.form("br_drop_form"):
        st.markdown("**Remove attention to the first k tokens** (each row renormalizes over the rest)")
        k = st.number_input("k", 1, 8, 1, key="br_k")
        layers = lessons.layer_range("br_layers", n_layers, (min(2, n_layers - 1), n_layers - 1))
        if st.form_submit_button("Drop them"):
            lessons.remember("br_drop", trace, interventions.DropFirst(int(k), layers))
    return lessons.remembered("br_drop", trace)


def _random_word(request: common.Request) -> str:
    loaded = common.get_model(request.model, request.dtype)
    seed = st.session_state["br_seed"] = st.session_state.get("br_seed", -1) + 1  # a new word every time
    return interventions.random_word(loaded.tokenizer, seed)


def replace_first(request: common.Request, trace: Trace) -> interventions.Intervention | None:
    with st.form("br_replace_form"):
        st.markdown(f"**Replace the first token** (now `{trace.tokens[0]}`) with another one")
        choice = st.radio(
            "Replacement", list(REPLACEMENTS), format_func=REPLACEMENTS.get, key="br_choice", horizontal=True
        )
        own = st.text_input("Your own (one token)", key="br_own")
        if st.form_submit_button("Replace it"):
            text = own if choice == "own" else _random_word(request) if choice == "random" else choice
            loaded = common.get_model(request.model, request.dtype)
            change = lessons.attempt(lambda: interventions.single_token(loaded, text))
            if change is not None:
                lessons.remember("br_replace", trace, change)
    return lessons.remembered("br_replace", trace)


def sensitivity(request: common.Request, trace: Trace) -> dict[int, float] | None:
    """The form and the KL of each perturbation, which it returns once run."""
    st.subheader("Single-token sensitivity")
    st.markdown(
        "Push one token's embedding by the same distance in a fixed random direction, once for the first "
        "(sink) token and once for another, and measure how much the later predictions move (mean KL)."
    )
    if trace.n_tokens < 3:
        st.info("This needs at least three tokens.")
        return None
    with st.form("br_sens_form"):
        st.session_state.setdefault("br_position", trace.n_tokens // 2)
        common.clamp("br_position", trace.n_tokens - 1)
        position = st.slider("The other token", 1, trace.n_tokens - 1, key="br_position")
        size = st.slider("Distance (× the median embedding norm)", 0.25, 4.0, 1.0, 0.25, key="br_size")
        submitted = st.form_submit_button("Perturb both")
    if submitted:
        st.session_state["br_sens"] = (trace.token_ids, position, size)
    asked = st.session_state.get("br_sens")
    if asked is None or asked[0] != trace.token_ids:
        return None
    _, position, size = asked
    loaded = common.get_model(request.model, request.dtype)

    def run() -> dict[int, float]:
        return interventions.sensitivity(
            loaded, trace.token_ids, [0, position], size * interventions.embedding_scale(loaded, trace.token_ids)
        )

    kl = lessons.attempt(
        lambda: lessons.cached(request, "sensitivity", (trace.token_ids, position, size), run, "Perturbing…")
    )
    if kl is not None:
        cells = st.columns(3)
        cells[0].metric(f"KL after nudging token 0 ({trace.tokens[0]})", f"{kl[0]:.4f}")
        cells[1].metric(f"KL after nudging token {position} ({trace.tokens[position]})", f"{kl[position]:.4f}")
        cells[2].metric("ratio", ratio_text(kl))
        st.caption(f"Averaged over the predictions from token {position} on, which both perturbations reach.")
    return kl


def ppl_change(intact: interventions.Outcome, changed: interventions.Outcome) -> str:
    return f"{np.exp(intact.loss):.2f} → {np.exp(changed.loss):.2f}"


def ratio_text(kl: dict[int, float]) -> str:
    """How many times more the predictions move when the first token is nudged."""
    first, other = kl.values()
    return f"{first / other:.1f}x" if other > 0 else "—"


st.title("Break the sink")
st.markdown(
    "If the sink is where heads park spare attention, taking it away should hurt: the weight must land on "
    "real tokens and mix their values in. StreamingLLM found exactly that when a sliding-window cache evicts "
    "the first tokens. Try it here, in chosen layers, and see whether the **position** or the **token** matters."
)
analysis = lessons.analysis()
if analysis is not None:
    request, trace = analysis.request, analysis.trace
    left, right = st.columns(2)
    with left:
        dropped = drop_first(request, trace)
    with right:
        replaced = replace_first(request, trace)
    changes = [c for c in (dropped, replaced) if c is not None]
    found = {}
    if changes:
        ids = trace.token_ids
        runs = lessons.attempt(lambda: [lessons.outcome(request, ids, c) for c in [None, *changes]])
        if runs is not None:
            lessons.comparison(runs[0], runs[1:], "br_compare")
            found = {type(c): ppl_change(runs[0], o) for c, o in zip(changes, runs[1:], strict=True)}
    kl = sensitivity(request, trace)
    lessons.paper_table(
        [
            (
                "evicting the first tokens (window only), ppl",
                "5158 vs 5.40 with 4 sinks (collapse)",
                found.get(interventions.DropFirst, "drop the first keys above"),
            ),
            (
                "4 '\\n' tokens as sinks instead of the real ones, ppl",
                "5.60 vs 5.40: position matters, not content",
                found.get(interventions.ReplaceFirst, "replace the first token above"),
            ),
            (
                "perturbing the dominant token vs another",
                "softmax far more sensitive than sigmoid",
                ratio_text(kl) + " more change" if kl else "perturb both above",
            ),
        ],
        "Xiao et al., StreamingLLM, ICLR 2024 (Llama-2-13B); Varre, Rofin, Flammarion 2026",
    )
url_state.sync_url()
