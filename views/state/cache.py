"""The cache every session shares: results bounded by bytes, one run queue per model, and the jobs that fill it.

A job's cache key is built in one place (``Job.cache_key``): the warm start and ``run_once`` find the same entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import streamlit as st
from sinkscope.core.arrays import pool_max
from sinkscope.core.bundled import BUNDLED
from sinkscope.core.capture import LayerMaps, Trace, analyze, attention_maps, thumbnails
from sinkscope.core.errors import SinkscopeError, TokenLimitError
from sinkscope.core.models import LoadedModel, load_model, resolve_device
from sinkscope.core.tokens import adds_bos_by_default, has_bos
from sinkscope.experiments import kv_check, kv_evict, stream_plan, streaming
from sinkscope.serving.runs import BoundedCache, RunQueue, Wait
from sinkscope.serving.settings import Settings

from views.state.session import EXAMPLES, GPU_DTYPES, Analysis, Request, owner, settings
from views.text import say, t

WARM_UP = "warm-up"  # the owner of the warm start's results


@dataclass
class Shared:
    """Process-wide state: one run queue per model (and one for the lab) and one result cache bounded by
    bytes, shared by every session: analyses, recomputed maps, lesson runs and lab runs alike."""

    settings: Settings
    results: BoundedCache
    queues: dict[str, RunQueue] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def queue(self, name: str) -> RunQueue:
        with self.lock:
            return self.queues.setdefault(name, RunQueue())


@st.cache_resource
def shared() -> Shared:
    config = settings()
    return Shared(config, BoundedCache(config.cache_bytes, config.session_cache_bytes))


@st.cache_resource(show_spinner=False, max_entries=2)
def _cached_model(spec: str, dtype: str) -> LoadedModel:
    return load_model(spec, dtype=dtype)


def get_model(spec: str, dtype: str) -> LoadedModel:
    with st.spinner(t("side.loading_model")):
        return _cached_model(spec, dtype)


@dataclass(frozen=True)
class Job:
    """One cacheable computation: it runs in ``queue``'s turn (a model spec, or "lab") and is cached under
    ``cache_key``, the only place a key is built."""

    queue: str
    key: tuple[Hashable, ...]  # everything the result depends on, besides the queue
    run: Callable[[], Any]

    @property
    def cache_key(self) -> tuple[Hashable, ...]:
        return (self.queue, *self.key)

    def result(self, owner: str, on_wait: Callable[[Wait], None] | None = None, background: bool = False) -> Any:
        """The cached result, or the run's in its queue's turn, charged to ``owner`` (a session or the warm start);
        ``background`` work (the warm start's) runs only while no visitor waits."""
        queue = shared().queue(self.queue)
        return shared().results.get_or_run(self.cache_key, owner, self.run, queue, on_wait=on_wait,
                                           background=background)  # fmt: skip


def waiting_for(wait: Wait) -> str:
    """What a visitor's run waits for, in words: the server's own preparation or other visitors' runs, and for about
    how long once runs like them have been timed."""
    if wait.seconds is None:
        return t("common.wait_visitors" if wait.visitors else "common.wait_server", n=wait.visitors)
    key = "common.wait_visitors_eta" if wait.visitors else "common.wait_server_eta"
    return t(key, n=wait.visitors, s=max(1, round(wait.seconds)))


@contextmanager
def _in_line(message: str) -> Iterator[Callable[[int], None]]:
    """A spinner saying ``message``; yields what a queue turn calls with the runs ahead, to show the position."""
    notice = st.empty()

    def waiting(wait: Wait) -> None:
        notice.info(waiting_for(wait))

    try:
        with st.spinner(message):
            yield waiting
    finally:
        notice.empty()


def run_once(queue: str, key: tuple[Hashable, ...], run: Callable[[], Any], message: str) -> Any:
    """The result cached under ``key`` for every session, or ``run()`` in ``queue``'s turn (a model, or
    the lab); shows the queue position while waiting."""
    return run_job(Job(queue, key, run), message)


def run_job(job: Job, message: str) -> Any:
    """``run_once`` of a job built elsewhere."""
    found = shared().results.get(job.cache_key)
    if found is not None:
        return found
    with _in_line(message) as waiting:
        return job.result(owner(), on_wait=waiting)


def run_all(jobs: list[Job], message: str) -> list[Any]:
    """Each job's cached result, the missing ones run in one turn of their queue (the jobs share one: a page's runs
    on its model), so a page that needs several waits in line once; a job that failed leaves its exception."""
    results = shared().results
    found = [results.get(job.cache_key) for job in jobs]
    if all(value is not None for value in found):
        return found
    runs = [(job.cache_key, job.run) for job in jobs]
    with _in_line(message) as waiting:
        return results.get_or_run_all(runs, owner(), shared().queue(jobs[0].queue), on_wait=waiting)


def token_limit(loaded: LoadedModel) -> int:
    return min(shared().settings.max_tokens, loaded.info.max_tokens)


def trace_job(loaded: LoadedModel, request: Request) -> Job:
    """The job that analyzes a request's text: its key holds everything the trace depends on."""
    limit = token_limit(loaded)

    def run() -> Trace:
        return analyze(loaded, request.text, max_tokens=limit, truncate=request.truncate, add_bos=request.add_bos)

    return Job(request.model, ("trace", request.dtype, request.text, request.add_bos, request.truncate, limit), run)


def _let_others_in(spec: str) -> Callable[[], None]:
    """What a long job calls between its steps: visitors waiting on the model go first."""
    return shared().queue(spec).let_others_in


def streaming_check_job(loaded: LoadedModel, spec: str, dtype: str) -> Job:
    """The scoreboard's streaming check (``stream_plan.check``, on Python's help text): one per model and dtype,
    whatever the visitor's text, so the warm start runs it once for every scoreboard."""

    def run() -> dict[str, float]:
        streaming.rotary_of(loaded.model)  # the streaming page's own refusal of a model it cannot re-position
        return stream_plan.check(loaded, between=_let_others_in(spec))

    return Job(spec, ("claims_streaming", dtype), run)


def kv_check_job(loaded: LoadedModel, spec: str, dtype: str) -> Job | None:
    """The scoreboard's KV-cache check (``kv_check.check``): one per model and dtype, made by the warm start; None
    for a model whose cache is not evicted here (its claims say "not measured" quietly)."""
    if kv_evict.refusal(loaded) is not None:
        return None
    return Job(spec, ("claims_kv", dtype), lambda: kv_check.check(loaded, between=_let_others_in(spec)))


def get_trace(request: Request) -> Trace:
    job = trace_job(request.loaded, request)
    return run_once(job.queue, job.key, job.run, t("common.running_model"))


def warm_examples(loaded_model: Callable[[], None] = lambda: None) -> None:
    """Load the default model and analyze every example text into the shared cache, as the sidebar would ask
    for them, then run the scoreboard's streaming and KV-cache checks: once when the server starts, so a class's
    first visits find their heatmaps ready and a scoreboard runs only what depends on its text. Every run is
    background work: a visitor who asks meanwhile goes first, after at most one of its steps; ``loaded_model`` is
    called once the model is loaded (the server logs it)."""
    config = settings()
    spec = next(key for key in BUNDLED if config.allows(key))  # the sidebar's first choice
    if not BUNDLED[spec].installed():
        return
    dtype = GPU_DTYPES[0] if resolve_device() == "cuda" else "auto"
    loaded = _cached_model(spec, dtype)
    loaded_model()
    add_bos = adds_bos_by_default(loaded.tokenizer) if has_bos(loaded.tokenizer) else None
    for example in EXAMPLES.values():
        job = trace_job(loaded, Request(spec, dtype, example["text"], add_bos, truncate=False))
        job.result(WARM_UP, background=True)
    jobs = [streaming_check_job(loaded, spec, dtype), kv_check_job(loaded, spec, dtype)]  # no text changes them
    for job in filter(None, jobs):
        job.result(WARM_UP, background=True)


def get_layer_maps(request: Request, trace: Trace, layer: int) -> LayerMaps:
    """One layer's maps of the trace's text: that layer alone runs, from the trace's h^layer."""
    loaded, ids = request.loaded, trace.token_ids
    run = lambda: attention_maps(loaded, ids, layer, start=trace.residual[layer])  # noqa: E731
    return run_once(request.model, ("maps", request.dtype, ids, layer), run, t("common.recomputing_layer"))


def get_layer_strip(request: Request, trace: Trace, layer: int) -> np.ndarray:
    """Every head of one layer max-pooled to 64 x 64, (1, head, rows, cols): computed once per layer, not per scrub."""
    maps = get_layer_maps(request, trace, layer)
    run = lambda: np.stack([pool_max(m, 64)[0] for m in maps.weights])[None]  # noqa: E731
    key = ("strip", request.dtype, trace.token_ids, layer)
    return run_once(request.model, key, run, t("common.recomputing_layer"))


def get_thumbnails(request: Request, token_ids: tuple[int, ...]) -> np.ndarray:
    loaded = request.loaded
    run = lambda: thumbnails(loaded, token_ids, size=32)  # noqa: E731
    return run_once(request.model, ("thumbnails", request.dtype, token_ids), run, t("common.drawing_heads"))


def step_choices(choices: list[int]) -> list[int]:
    """The training lengths this deployment allows (hosted mode caps them)."""
    allowed = [steps for steps in choices if steps <= shared().settings.max_lab_steps]
    return allowed or choices[:1]


def _token_limit_notice(request: Request, err: TokenLimitError, prefix: str) -> None:
    st.warning(t("common.too_long", error=say(err), limit=err.limit))
    if st.button(t("common.truncate", limit=err.limit), key=prefix + "truncate_button"):
        st.session_state[prefix + "truncate_text"] = request.text  # only this text: a new one is checked again
        st.rerun()


def analysis_of(request: Request, prefix: str = "") -> Analysis | None:
    """The analysis of ``request``, or None with a message on the page."""
    try:
        return Analysis(request, get_trace(request))
    except TokenLimitError as err:
        _token_limit_notice(request, err, prefix)
    except (SinkscopeError, RuntimeError, MemoryError) as err:  # a failed run must not end the session
        st.error(say(err) if isinstance(err, SinkscopeError) else t("common.model_failed", error=err))
    return None


def current_analysis(request: Request | None) -> Analysis | None:
    """The analysis of the sidebar's text; after a failed run, the message and the previous result of the same model
    (never another model's figures under this one's name); nothing without a request (no model loaded).

    A session keeps only its last request: the result lives in the shared cache, bounded by bytes (a trace at
    512 tokens is about 37 MB, mostly its residual norms), and is computed again if it was evicted.
    """
    if request is None:
        return None
    analysis = analysis_of(request)
    if analysis is not None:
        st.session_state["last_request"] = request
        return analysis
    previous = st.session_state.get("last_request")
    if previous is None or previous == request or (previous.model, previous.dtype) != (request.model, request.dtype):
        return None
    st.caption(t("common.previous_result"))
    return analysis_of(previous)
