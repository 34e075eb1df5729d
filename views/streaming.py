"""Streaming: evict the sink and the model collapses; keep four tokens and it streams on (StreamingLLM)."""

import time

import pandas as pd
import streamlit as st
from sinkscope import plot, streaming
from sinkscope.errors import SinkscopeError

from views import common, url_state
from views.text import language, num, say, t

SINK_CHOICES = [0, 1, 2, 4, 8]
PAPER_POLICIES = ["stream.paper_dense", "stream.paper_window", "stream.paper_recompute", "stream.paper_sinks"]


def paper_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Xiao et al.'s numbers, with headers in the interface language."""
    cache = {
        t("stream.paper_policy"): [t(key) for key in PAPER_POLICIES],
        t("stream.paper_ppl13"): [5641, 5158, 5.43, 5.40],
    }
    sinks = {t("stream.paper_s"): SINK_CHOICES, t("stream.paper_ppl7"): [3359.95, 11.88, 10.51, 9.59, 9.54]}
    return pd.DataFrame(cache), pd.DataFrame(sinks)


def controls(limit: int) -> tuple[bool, dict]:
    with st.form("stream_form"):
        left, right = st.columns(2)
        source = left.radio(t("stream.text"), ["builtin", "sidebar"], key="stream_source", format_func=source_label)
        n_tokens = left.slider(t("stream.tokens"), 64, limit, min(512, limit), 32, key="stream_tokens")
        sinks = right.select_slider(t("stream.sinks"), SINK_CHOICES, value=4, key="stream_sinks")
        window = right.slider(t("stream.window"), 4, 1020, 60, key="stream_window")
        chosen = st.multiselect(
            t("stream.methods"), streaming.METHODS, ["dense", "window", "sinks", "recompute"], key="stream_methods",
            format_func=method_label,
        )  # fmt: skip
        run = st.form_submit_button(t("stream.run"), type="primary")
    return run, {"source": source, "tokens": n_tokens, "sinks": sinks, "window": window, "methods": chosen}


ENGINES = {"mask-sinks": "stream.engine_mask", "sinks": "stream.engine_loop"}
SOURCES = {"builtin": "stream.source_builtin", "sidebar": "stream.source_sidebar"}
METHOD_KEYS = {
    "dense": "method.dense",
    "window": "method.window",
    "sinks": "method.sinks",
    "recompute": "method.recompute",
    "mask-window": "method.mask_window",
    "mask-sinks": "method.mask_sinks",
}


def source_label(source: str) -> str:
    return t(SOURCES[source])


def method_label(method: str) -> str:
    return t(METHOD_KEYS[method])


def engine_label(engine: str) -> str:
    return t(ENGINES[engine])


def stream_ids(loaded: object, config: dict, text: str) -> list[int]:
    source = streaming.builtin_text() if config["source"] == "builtin" else text
    return loaded.tokenizer(source, add_special_tokens=False)["input_ids"][: config["tokens"]]


def run_all(request: common.Request, config: dict, ids: list[int]) -> None:
    """Stream every method; partial curves land in the session as they grow, so a stop keeps them."""
    loaded = common.get_model(request.model, request.dtype)
    results = st.session_state["stream_results"] = {"config": config, "curves": {}, "seconds": {}}
    bar, queue = st.progress(0.0), common.shared().queue(request.model)
    for method in config["methods"]:
        start = time.monotonic()

        def progress(done: list[float], total: int, method: str = method, start: float = start) -> bool:
            results["curves"][method] = list(done)
            left = (time.monotonic() - start) / max(1, len(done)) * (total - len(done))
            bar.progress(len(done) / total, text=t("stream.progress", method=method, done=len(done), total=total,
                                                    left=num(left, ".0f")))  # fmt: skip
            queue.let_others_in()  # a visitor's short run goes between two of these tokens
            return True

        with queue.turn():
            nll = streaming.streaming_nll(loaded, ids, method, config["sinks"], config["window"], progress)
        results["curves"][method] = list(nll)
        results["seconds"][method] = time.monotonic() - start
    bar.empty()


def show_results(results: dict) -> None:
    config, curves = results["config"], results["curves"]
    size = config["sinks"] + config["window"]
    rows = []
    for method, nll in curves.items():
        sinks, window = streaming.method_cache(method, config["sinks"], config["window"], config["tokens"])
        seconds = results["seconds"].get(method, t("stream.stopped"))  # a stopped method has no time
        rows.append({t("stream.col_method"): method_label(method), "S": sinks, "W": window,
                     t("stream.col_scored"): len(nll), t("stream.col_ppl"): streaming.perplexity(nll),
                     t("stream.col_seconds"): seconds})  # fmt: skip
    st.dataframe(common.local_table(pd.DataFrame(rows), 3), hide_index=True, key="stream_table")
    width = max(8, config["window"] // 2)
    labels = {method: method_label(method) for method in curves}
    st.plotly_chart(plot.fig_stream_nll(curves, labels, size, width, lang=language()), key="stream_nll")
    step = st.slider(t("stream.cache_step"), 0, config["tokens"] - 1, min(config["tokens"] - 1, size + 10))
    membership = plot.fig_cache_membership(config["tokens"], config["sinks"], config["window"], step, lang=language())
    st.plotly_chart(membership, key="cache_membership")


def sweep(request: common.Request, ids: list[int], cache_size: int, engine: str) -> list[float]:
    """Perplexity for every sink count at one cache size; a progress bar (and a Stop point) at every step."""
    loaded = common.get_model(request.model, request.dtype)
    bar, queue, ppl = st.progress(0.0, text=t("stream.sweeping")), common.shared().queue(request.model), []
    for index, sinks in enumerate(SINK_CHOICES):

        def progress(done: list[float], total: int, index: int = index, sinks: int = sinks) -> bool:
            share = (index + len(done) / total) / len(SINK_CHOICES)
            bar.progress(share, text=t("stream.sweep_progress", sinks=sinks, done=len(done), total=total))
            queue.let_others_in()
            return True

        with queue.turn():
            ppl.append(
                streaming.perplexity(
                    streaming.streaming_nll(loaded, ids, engine, sinks, max(1, cache_size - sinks), progress)
                )
            )
        bar.progress((index + 1) / len(SINK_CHOICES), text=t("stream.sweeping"))
    bar.empty()
    return ppl


def sink_sweep(request: common.Request, ids: list[int], cache_size: int) -> None:
    st.subheader(t("stream.sweep_title"))
    engine = st.radio(t("stream.engine"), list(ENGINES), horizontal=True, key="sweep_engine", format_func=engine_label)
    if st.button(t("stream.sweep"), key="sweep"):
        st.button(t("stream.stop"), key="stop_sweep", help=t("stream.stop_sweep_help"))  # a click reruns: it stops
        st.session_state["sweep_result"] = (sweep(request, ids, cache_size, engine), cache_size, engine)
    if "sweep_result" in st.session_state:
        ppl, size, used = st.session_state["sweep_result"]
        st.plotly_chart(
            plot.fig_ppl_vs_sinks(SINK_CHOICES, ppl, size, engine_label(used), lang=language()), key="sweep_chart"
        )


def generate_both(request: common.Request, prompt: list[int]) -> list[str]:
    """The same prompt continued with 4 sinks + 16 recent tokens and with 20 recent tokens."""
    loaded = common.get_model(request.model, request.dtype)
    bar, queue, texts = st.progress(0.0, text=t("stream.generating")), common.shared().queue(request.model), []
    for index, sinks in enumerate((4, 0)):

        def progress(done: list[float], total: int, index: int = index) -> bool:
            bar.progress((index + len(done) / total) / 2, text=t("stream.generating"))
            queue.let_others_in()
            return True

        with queue.turn():
            texts.append(loaded.tokenizer.decode(streaming.generate(loaded, prompt, 80, sinks, 20 - sinks, progress)))
    bar.empty()
    return texts


def gibberish_demo(request: common.Request, ids: list[int]) -> None:
    st.subheader(t("stream.generate_title"))
    st.caption(t("stream.generate_help"))
    if st.button(t("stream.generate"), key="generate"):
        st.button(t("stream.stop"), key="stop_generate", help=t("stream.stop_sweep_help"))
        st.session_state["generated_texts"] = generate_both(request, ids[:48])
    if "generated_texts" in st.session_state:
        left, right = st.columns(2)
        left.markdown(t("stream.with_sinks"))
        left.text(st.session_state["generated_texts"][0])
        right.markdown(t("stream.without_sinks"))
        right.text(st.session_state["generated_texts"][1])


def paper() -> None:
    st.subheader(t("stream.paper_title"))
    st.caption(t("stream.paper_source"))
    left, right = st.columns(2)
    cache_table, sinks_table = paper_tables()
    left.table(common.local_table(cache_table.set_index(cache_table.columns[0]), 2))  # static: columns wrap
    right.table(common.local_table(sinks_table.set_index(sinks_table.columns[0]), 2))


def page() -> None:
    """Streaming: evict the sink and the model collapses; keep four tokens and it streams on (StreamingLLM)."""
    st.title(t("stream.title"))
    st.markdown(t("stream.intro"))
    request = common.sidebar()
    if request is not None:
        try:
            loaded = common.get_model(request.model, request.dtype)
            streaming.rotary_of(loaded.model)
        except SinkscopeError as err:
            st.error(say(err))
            st.stop()
        limit = min(4096, 2 * common.shared().settings.max_tokens)
        run, config = controls(limit)
        ids = stream_ids(loaded, config, request.text)
        if run:
            if len(ids) < config["tokens"]:
                st.warning(t("stream.short_text", n=len(ids)))
                config["tokens"] = len(ids)
            cache = config["sinks"] + config["window"]
            if config["tokens"] <= cache:  # the cache never fills: every method would be the dense pass
                st.warning(t("stream.never_fills", tokens=config["tokens"], cache=cache))
            else:
                st.button(t("stream.stop"), key="stop_stream", help=t("stream.stop_help"))
                run_all(request, config, ids[: config["tokens"]])
        if "stream_results" in st.session_state:
            show_results(st.session_state["stream_results"])
        sink_sweep(request, ids, config["sinks"] + config["window"])
        gibberish_demo(request, ids)
        paper()
    url_state.sync_url()


if __name__ == "__main__":  # Streamlit runs a page file as __main__; importing it runs nothing
    page()
