"""Streaming: evict the sink and the model collapses; keep four tokens and it streams on (StreamingLLM)."""

import time

import pandas as pd
import streamlit as st

from backend import figures, streaming
from backend.errors import SinkscopeError
from views import common, url_state

SINK_CHOICES = [0, 1, 2, 4, 8]
PAPER_CACHE = pd.DataFrame(
    {
        "cache policy": ["dense (past training length)", "window 0+1024", "re-computation", "sinks 4+1020"],
        "Llama-2-13B perplexity": [5641, 5158, 5.43, 5.40],
    }
)
PAPER_SINKS = pd.DataFrame(
    {"sinks S": SINK_CHOICES, "Llama-2-7B perplexity (cache 4096)": [3359.95, 11.88, 10.51, 9.59, 9.54]}
)


def controls(limit: int) -> tuple[bool, dict]:
    with st.form("stream_form"):
        left, right = st.columns(2)
        source = left.radio("Text", ["builtin", "sidebar"], key="stream_source", format_func=SOURCES.get)
        n_tokens = left.slider("Tokens to stream", 64, limit, min(512, limit), 32, key="stream_tokens")
        sinks = right.select_slider("Sink tokens S", SINK_CHOICES, value=4, key="stream_sinks")
        window = right.slider("Recent window W", 4, 1020, 60, key="stream_window")
        chosen = st.multiselect(
            "Methods", streaming.METHODS, ["dense", "window", "sinks", "recompute"], key="stream_methods",
            format_func=streaming.METHOD_LABELS.get,
        )  # fmt: skip
        run = st.form_submit_button("Stream", type="primary")
    return run, {"source": source, "tokens": n_tokens, "sinks": sinks, "window": window, "methods": chosen}


ENGINES = {"mask-sinks": "mask emulation (fast, approximate)", "sinks": "real streaming loop"}
SOURCES = {"builtin": "Python's built-in documentation (long, works offline)", "sidebar": "the sidebar's text"}


def stream_ids(loaded: object, config: dict, text: str) -> list[int]:
    source = streaming.builtin_text() if config["source"] == "builtin" else text
    return loaded.tokenizer(source, add_special_tokens=False)["input_ids"][: config["tokens"]]


def run_all(request: common.Request, config: dict, ids: list[int]) -> None:
    """Stream every method; partial curves land in the session as they grow, so a stop keeps them."""
    loaded = common.get_model(request.model, request.dtype)
    results = st.session_state["stream_results"] = {"config": config, "curves": {}, "seconds": {}}
    bar = st.progress(0.0)
    for method in config["methods"]:
        start = time.monotonic()

        def progress(done: list[float], total: int, method: str = method, start: float = start) -> bool:
            results["curves"][method] = list(done)
            left = (time.monotonic() - start) / max(1, len(done)) * (total - len(done))
            bar.progress(len(done) / total, text=f"{method}: {len(done)}/{total} tokens · about {left:.0f} s left")
            return True

        with common.shared().queue(request.model).turn():
            nll = streaming.run_method(loaded, ids, method, config["sinks"], config["window"], progress)
        results["curves"][method] = list(nll)
        results["seconds"][method] = time.monotonic() - start
    bar.empty()


def show_results(results: dict) -> None:
    config, curves = results["config"], results["curves"]
    size = config["sinks"] + config["window"]
    rows = []
    for method, nll in curves.items():
        sinks, window = streaming.method_cache(method, config["sinks"], config["window"], config["tokens"])
        seconds = results["seconds"].get(method)
        rows.append({"method": streaming.METHOD_LABELS[method], "S": sinks, "W": window, "tokens scored": len(nll),
                     "perplexity": streaming.perplexity(nll), "seconds": seconds})  # fmt: skip
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="stream_table")
    width = max(8, config["window"] // 2)
    st.plotly_chart(figures.fig_stream_nll(curves, streaming.METHOD_LABELS, size, width), key="stream_nll")
    step = st.slider("Cache contents at step", 0, config["tokens"] - 1, min(config["tokens"] - 1, size + 10))
    membership = figures.fig_cache_membership(config["tokens"], config["sinks"], config["window"], step)
    st.plotly_chart(membership, key="cache_membership")


def sink_sweep(request: common.Request, ids: list[int], cache_size: int) -> None:
    st.subheader("How many sinks? (the shape of Xiao et al.'s Table 2)")
    engine = st.radio("Engine", list(ENGINES), horizontal=True, key="sweep_engine", format_func=ENGINES.get)
    if st.button("Sweep S = 0, 1, 2, 4, 8", key="sweep"):
        loaded = common.get_model(request.model, request.dtype)
        with st.spinner("Sweeping…"), common.shared().queue(request.model).turn():
            ppl = [streaming.perplexity(streaming.run_method(loaded, ids, engine, s, max(1, cache_size - s)))
                   for s in SINK_CHOICES]  # fmt: skip
        st.session_state["sweep_result"] = (ppl, cache_size, engine)
    if "sweep_result" in st.session_state:
        ppl, size, used = st.session_state["sweep_result"]
        st.plotly_chart(figures.fig_ppl_vs_sinks(SINK_CHOICES, ppl, size, used), key="sweep_chart")


def gibberish_demo(request: common.Request, ids: list[int]) -> None:
    st.subheader("Generate with a tiny cache")
    st.caption("Greedy continuation of the text's first 48 tokens with a cache of 4 + 16 tokens, or 0 + 20.")
    if st.button("Generate 80 tokens both ways", key="generate"):
        loaded = common.get_model(request.model, request.dtype)
        with st.spinner("Generating…"), common.shared().queue(request.model).turn():
            texts = [loaded.tokenizer.decode(streaming.generate(loaded, ids[:48], 80, s, 20 - s)) for s in (4, 0)]
        st.session_state["generated_texts"] = texts
    if "generated_texts" in st.session_state:
        left, right = st.columns(2)
        left.markdown("**With 4 sinks**")
        left.text(st.session_state["generated_texts"][0])
        right.markdown("**Without sinks**")
        right.text(st.session_state["generated_texts"][1])


st.title("Streaming with attention sinks")
st.markdown(
    "A model that reads an endless stream must drop old tokens from its KV cache. Drop the **first** "
    "tokens too and the heads that parked their spare attention there lose their sink: the loss jumps "
    "the moment eviction starts. Keep just 4 first tokens plus a recent window (StreamingLLM) and the "
    "model streams on, nearly as well as re-reading the window from scratch at every token."
)
request = common.sidebar()
if request is not None:
    try:
        loaded = common.get_model(request.model, request.dtype)
        streaming.rotary_of(loaded.model)
    except SinkscopeError as err:
        st.error(str(err))
        st.stop()
    limit = min(4096, 2 * common.shared().settings.max_tokens)
    run, config = controls(limit)
    ids = stream_ids(loaded, config, request.text)
    if run:
        if len(ids) < config["tokens"]:
            st.warning(f"The text has only {len(ids)} tokens; streaming all of them.")
            config["tokens"] = len(ids)
        st.button("Stop", key="stop_stream", help="Stops after the current token; what was scored stays.")
        run_all(request, config, ids[: config["tokens"]])
    if "stream_results" in st.session_state:
        show_results(st.session_state["stream_results"])
    sink_sweep(request, ids, config["sinks"] + config["window"])
    gibberish_demo(request, ids)
    st.subheader("Your model beside the paper")
    st.caption("Xiao et al., Efficient Streaming Language Models with Attention Sinks, ICLR 2024 (PG-19).")
    left, right = st.columns(2)
    left.dataframe(PAPER_CACHE, hide_index=True)
    right.dataframe(PAPER_SINKS, hide_index=True)
url_state.sync_url()
