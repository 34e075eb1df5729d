"""Streaming: evict the sink and the model collapses; keep four tokens and it streams on (StreamingLLM)."""

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from sinkscope import plot
from sinkscope.core import loss, texts
from sinkscope.core.capabilities import Can
from sinkscope.core.errors import InputError, SinkscopeError
from sinkscope.core.i18n import Message
from sinkscope.core.models import LoadedModel
from sinkscope.experiments import streaming
from sinkscope.experiments.stream_plan import REAL_CACHE, StreamJob, StreamResults, StreamSetup, plan, run_job
from sinkscope.findings import sources

from views.frame import Context
from views.state import cache, session, url_state
from views.state.cache import Job, Show
from views.text import language, local_figure, local_table, num, say, t
from views.widgets import charts, jobs, stop_button

SINK_CHOICES = [0, 1, 2, 4, 8]
GENERATION = {"new": 80, "prompt": 48, "sinks": 4, "cache": 20}  # the gibberish demo: tokens, prompt, two caches
DEFAULT_TOKENS = 256  # the 60-token window evicts for 190 tokens: the jump shows, and a class waits < 30 s
PAPER_POLICIES = ["stream.paper_dense", "stream.paper_window", "stream.paper_recompute", "stream.paper_sinks"]


def as_printed(values: list[float]) -> list[str]:
    """A paper's perplexities as it prints them, in the viewer's language: 5,158 and 5.40 in one column."""
    return [num(value, ",.0f" if value == int(value) else ",.2f") for value in values]


def paper_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Xiao et al.'s numbers, with headers in the interface language."""
    policies = {
        t("stream.paper_policy"): [t(key) for key in PAPER_POLICIES],
        t("stream.paper_ppl13"): as_printed([5641, 5158, 5.43, 5.40]),
    }
    sinks = {t("stream.paper_s"): SINK_CHOICES, t("stream.paper_ppl7"): as_printed([3359.95, 11.88, 10.51, 9.59, 9.54])}
    return pd.DataFrame(policies), pd.DataFrame(sinks)


def linked_setup(limit: int) -> None:
    """The form's settings: those a link carries (the course's streaming step opens the page on its own check) on
    a session's first visit, else the defaults; a value the form cannot take is named and left at its default."""
    state, params = st.session_state, st.query_params
    defaults = {"tokens": min(DEFAULT_TOKENS, limit), "sinks": 4, "window": 60, "methods": ["dense", "window", "sinks"]}
    readers = {
        "tokens": lambda v: int(v) if 64 <= int(v) <= limit and int(v) % 32 == 0 else None,
        "sinks": lambda v: int(v) if int(v) in SINK_CHOICES else None,
        "window": lambda v: int(v) if 4 <= int(v) <= 1020 else None,
        "methods": lambda v: v.split(",") if v and set(v.split(",")) <= set(streaming.METHODS) else None,
    }  # fmt: skip
    for name, default in defaults.items():
        if f"stream_{name}" in state:
            continue
        value = params.get(name)
        try:
            read = readers[name](value) if value is not None else None
        except ValueError:
            read = None
        if value is not None and read is None:
            url_state.ignore(name, value)
        state[f"stream_{name}"] = default if read is None else read


def stream_form(limit: int) -> tuple[bool, str, StreamSetup]:
    """(run clicked, the text's source, what to stream)."""
    linked_setup(limit)
    with st.form("stream_form"):
        left, right = st.columns(2)
        source = left.radio(t("stream.text"), ["builtin", "sidebar"], key="stream_source", format_func=source_label)
        n_tokens = left.slider(t("stream.tokens"), 64, limit, step=32, key="stream_tokens")
        sinks = right.select_slider(t("stream.sinks"), SINK_CHOICES, key="stream_sinks")
        window = right.slider(t("stream.window"), 4, 1020, key="stream_window")
        chosen = st.multiselect(t("stream.methods"), streaming.METHODS, key="stream_methods", format_func=method_label)
        run = st.form_submit_button(t("stream.run"), type="primary")
    return run, source, StreamSetup(sinks, window, n_tokens, tuple(chosen))


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


def stream_ids(loaded: LoadedModel, source: str, n_tokens: int, text: str) -> list[int]:
    """The first tokens of the chosen text (only its beginning is tokenized: the built-in one is 465,000 characters)."""
    chosen = texts.builtin_text() if source == "builtin" else text
    try:
        return loaded.encode(chosen, n_tokens, truncate=True, add_bos=False)
    except InputError:
        return []  # an empty text: the page says it is too short


@dataclass
class Clock:
    """One time-left estimate for a whole run: its long jobs (the real cache, recompute) cost about the same per
    token, so the seconds per token so far predict the rest."""

    total: int  # tokens the long jobs stream in all
    done: int = 0  # tokens of the long jobs already finished
    spent: float = 0.0  # their seconds

    def finish(self, tokens: int, seconds: float) -> None:
        self.done, self.spent = self.done + tokens, self.spent + seconds

    def caption(self, methods: str, tokens: int, seconds: float) -> tuple[float, str]:
        """(share done, progress text) with ``tokens`` of the current job streamed in ``seconds``."""
        done, spent = self.done + tokens, self.spent + seconds
        left = num(spent / max(1, done) * (self.total - done), ".0f")
        return done / self.total, t("stream.progress", methods=methods, done=done, total=self.total, left=left)


class LiveRun:
    """What a streaming run shows while it works besides its bar: the curves as they grow (once a second)."""

    def __init__(self, results: StreamResults, clock: Clock) -> None:
        self.results, self.clock = results, clock
        self.chart = st.empty()
        self.drawn = 0.0
        self.draws = 0

    def draw(self) -> None:
        self.drawn, self.draws = time.monotonic(), self.draws + 1
        key = f"stream_live_{self.draws}"  # a key each time: the same curves drawn twice would share an element id
        self.chart.plotly_chart(local_figure(stream_figure(self.results)), key=key)

    def update(self, curves: dict[str, list[float]], seconds: float) -> tuple[float, str]:
        """Keep the curves so far (a stop keeps them), redraw them now and then; (share done, the bar's text)."""
        self.results.curves.update(curves)
        names, tokens = ", ".join(map(method_label, curves)), len(next(iter(curves.values())))
        if time.monotonic() - self.drawn > 1:
            self.draw()
        return self.clock.caption(names, tokens, seconds)

    def close(self) -> None:
        self.chart.empty()


def stream_job(request: session.Request, setup: StreamSetup, ids: list[int], job: StreamJob, live: LiveRun) -> Job:
    """One plan job as the job helper runs it, shared by every session that streams this text the same way."""

    def run(show: Show) -> dict[str, np.ndarray]:
        start = time.monotonic()

        def progress(curves: dict[str, list[float]], _total: int) -> bool:
            show(*live.update(curves, time.monotonic() - start))
            return True

        return run_job(request.loaded, ids, job, setup, progress)

    return Job(request.model, ("stream", request.dtype, tuple(ids), setup.sinks, setup.window, job.methods), run)


def run_all(request: session.Request, setup: StreamSetup, ids: list[int]) -> None:
    """Stream every method; the curves are drawn as they grow and land in the session, so a stop keeps them."""
    results = st.session_state["stream_results"] = StreamResults(setup)
    plan_jobs = plan(setup)
    live = LiveRun(results, Clock(max(1, sum(job.streams for job in plan_jobs)) * (len(ids) - 1)))
    for job in plan_jobs:
        start = time.monotonic()
        results.curves.update(jobs.run(stream_job(request, setup, ids, job, live), t("stream.streaming")))
        results.seconds.update(dict.fromkeys(job.methods, time.monotonic() - start))
        if job.streams:
            live.clock.finish(len(ids) - 1, time.monotonic() - start)
        live.draw()
    live.close()


def stream_figure(results: StreamResults) -> object:
    setup, labels = results.setup, {method: method_label(method) for method in results.curves}
    width = max(8, setup.window // 2)
    return plot.fig_stream_nll(results.curves, labels, setup.cache_size, width, lang=language())


def text_source(source: str, tokens: int) -> Message:
    """What a run on ``source`` is computed on, in the line under the form and the figures' captions."""
    return sources.builtin(tokens) if source == "builtin" else sources.own_text(tokens)


def show_results(results: StreamResults, on: Message | None) -> None:
    setup = results.setup
    rows = [{t("stream.col_method"): method_label(row.method), "S": row.sinks, "W": row.window,
             t("stream.col_scored"): row.scored, t("stream.col_ppl"): row.perplexity,
             t("stream.col_seconds"): t("stream.stopped") if row.seconds is None else row.seconds}
            for row in results.rows()]  # fmt: skip
    st.dataframe(local_table(pd.DataFrame(rows), 3), hide_index=True, key="stream_table")
    if len(set(setup.methods) & set(REAL_CACHE)) == 2:
        st.caption(t("stream.together"))
    charts.show(stream_figure(results), "stream_nll", on=on)
    step = st.slider(t("stream.cache_step"), 0, setup.tokens - 1, min(setup.tokens - 1, setup.cache_size + 10))
    membership = plot.fig_cache_membership(setup.tokens, setup.sinks, setup.window, step, lang=language())
    charts.show(membership, "cache_membership")


def sweep(request: session.Request, ids: list[int], cache_size: int, engine: str) -> tuple[list[int], list[float]]:
    """(sink counts, perplexities) at one cache size: with the real cache every count streams side by side as one
    batch; a bar (and a Stop point) at every step. Shared by every session that sweeps this text the same way."""
    loaded = request.loaded
    counts = [sinks for sinks in SINK_CHOICES if sinks < cache_size]  # a cache must hold the current token

    def run(show: Show) -> list[float]:
        if engine == "sinks":

            def progress(so_far: np.ndarray, total: int) -> bool:  # so_far: (lane, token) NLL
                show(so_far.shape[1] / total, t("stream.sweep_progress", done=so_far.shape[1], total=total))
                return True

            nll, _ = streaming.stream_lanes(loaded, ids, tuple(counts), cache_size, progress)
            return [loss.perplexity(row) for row in nll]
        ppl = []
        for index, sinks in enumerate(counts):
            ppl.append(loss.perplexity(streaming.streaming_nll(loaded, ids, engine, sinks, cache_size - sinks)))
            show((index + 1) / len(counts), t("stream.sweeping"))
        return ppl

    job = Job(request.model, ("sweep", request.dtype, tuple(ids), cache_size, engine), run)
    return counts, jobs.run(job, t("stream.sweeping"), stop=("stop_sweep", "stream.stop_sweep_help"))


def sink_sweep(request: session.Request, ids: list[int], cache_size: int) -> None:
    st.subheader(t("stream.sweep_title"))
    engine = st.radio(t("stream.engine"), list(ENGINES), horizontal=True, key="sweep_engine", format_func=engine_label)
    if st.button(t("stream.sweep", counts=", ".join(map(str, SINK_CHOICES))), key="sweep"):
        st.session_state["sweep_result"] = (*sweep(request, ids, cache_size, engine), cache_size, engine)
    if "sweep_result" in st.session_state:
        counts, ppl, size, used = st.session_state["sweep_result"]
        charts.show(plot.fig_ppl_vs_sinks(counts, ppl, size, engine_label(used), lang=language()), "sweep_chart")


def generate_both(request: session.Request, prompt: list[int]) -> list[str]:
    """The same prompt continued with GENERATION's sinks + recent tokens and with its cache of recent tokens only."""
    loaded = request.loaded

    def run(show: Show) -> list[list[int]]:
        def progress(done: list[float], total: int) -> bool:
            show(len(done) / total, t("stream.generating"))
            return True

        lanes = (GENERATION["sinks"], 0)
        return streaming.generate_lanes(loaded, prompt, GENERATION["new"], lanes, GENERATION["cache"], progress)

    job = Job(request.model, ("generate", request.dtype, tuple(prompt), tuple(GENERATION.items())), run)
    both = jobs.run(job, t("stream.generating"), stop=("stop_generate", "stream.stop_sweep_help"))
    return [loaded.tokenizer.decode(tokens) for tokens in both]


def prompt_of(tokenizer: Any, ids: list[int], most: int = GENERATION["prompt"]) -> list[int]:
    """The text's first tokens up to a word's end (at most ``most``): the continuations then start a word of
    their own instead of finishing one mid-token."""
    for end in range(min(most, len(ids) - 1), 0, -1):
        if tokenizer.decode(ids[end : end + 1])[:1].isspace():  # the next token opens a word
            return ids[:end]
    return ids[:most]


def gibberish_demo(request: session.Request, ids: list[int]) -> None:
    st.subheader(t("stream.generate_title"))
    st.caption(t("stream.generate_help", **GENERATION, recent=GENERATION["cache"] - GENERATION["sinks"]))
    if st.button(t("stream.generate", new=GENERATION["new"]), key="generate"):
        tokenizer = request.loaded.tokenizer
        prompt = prompt_of(tokenizer, ids)
        st.session_state["generated_texts"] = [tokenizer.decode(prompt), *generate_both(request, prompt)]
    if "generated_texts" in st.session_state:
        prompt, *continued = st.session_state["generated_texts"]
        st.markdown(t("stream.prompt"))
        st.text(prompt)
        left, right = st.columns(2)
        left.markdown(t("stream.with_sinks", sinks=GENERATION["sinks"]))
        left.text(continued[0])
        right.markdown(t("stream.without_sinks"))
        right.text(continued[1])


def paper() -> None:
    st.subheader(t("stream.paper_title"))
    st.caption(t("stream.paper_source"))
    left, right = st.columns(2)
    cache_table, sinks_table = paper_tables()
    left.table(local_table(cache_table.set_index(cache_table.columns[0]), 2))  # static: columns wrap
    right.table(local_table(sinks_table.set_index(sinks_table.columns[0]), 2))


def page(context: Context) -> None:
    """Streaming: evict the sink and the model collapses; keep four tokens and it streams on (StreamingLLM)."""
    st.title(t("stream.title"))
    st.markdown(t("stream.intro"))
    request = context.request
    if request is not None:
        try:
            loaded = request.loaded
            loaded.require(Can.STREAM)
        except SinkscopeError as err:
            st.error(say(err))
            st.stop()
        run, source, setup = stream_form(min(4096, 2 * cache.shared().settings.max_tokens))
        ids = stream_ids(loaded, source, setup.tokens, request.text)
        charts.computed_on(text_source(source, min(len(ids), setup.tokens)))
        if run:
            if len(ids) < setup.tokens:
                st.warning(t("stream.short_text", n=len(ids)))
                setup = replace(setup, tokens=len(ids))
            if not setup.fills():  # every method would be the dense pass
                st.warning(t("stream.never_fills", tokens=setup.tokens, cache=setup.cache_size))
            else:
                with stop_button.while_running("stop_stream", "stream.stop_help"):
                    run_all(request, setup, ids[: setup.tokens])
                st.session_state["stream_on"] = text_source(source, setup.tokens)
        if "stream_results" in st.session_state:
            show_results(st.session_state["stream_results"], st.session_state.get("stream_on"))
        sink_sweep(request, ids, setup.cache_size)
        gibberish_demo(request, ids)
        paper()
    url_state.sync_url()
