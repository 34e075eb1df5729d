"""The cache every session shares: results bounded by bytes, one run queue per model, and the jobs that fill it.

Nothing here draws: ``views.widgets.jobs`` runs a job for a page (its turn, its bar, its Stop). A job's cache key is
built in one place (``Job.cache_key``): the warm start and the pages find the same entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import streamlit as st
from sinkscope.core.arrays import pool_max
from sinkscope.core.bundled import BUNDLED
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import LayerMaps, Trace, analyze, attention_maps, thumbnails
from sinkscope.core.models import LoadedModel, load_model, resolve_device
from sinkscope.core.tokens import adds_bos_by_default, has_bos
from sinkscope.experiments import kv_check, stream_plan
from sinkscope.serving.runs import BoundedCache, Cancelled, RunQueue, Wait
from sinkscope.serving.settings import Settings

from views.state.session import EXAMPLES, GPU_DTYPES, Request, settings

WARM_UP = "warm-up"  # the owner of the warm start's results
Show = Callable[[float, str], None]  # a long run's progress: (share done, what the bar says); a step boundary too


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
def cached_model(spec: str, dtype: str) -> LoadedModel:
    """The model, loaded once per process for every session (the sidebar loads it; pages get it in their request)."""
    return load_model(spec, dtype=dtype)


@dataclass(frozen=True)
class Job:
    """One cacheable computation: ``run(show)`` runs in ``queue``'s turn (a model spec, or "lab") and is cached under
    ``cache_key``, the only place a key is built. A long run calls ``show`` between its steps."""

    queue: str
    key: tuple[Hashable, ...]  # everything the result depends on, besides the queue
    run: Callable[[Show], Any]

    @property
    def cache_key(self) -> tuple[Hashable, ...]:
        return (self.queue, *self.key)

    def result(self, owner: str, show: Show | None = None, on_wait: Callable[[Wait], None] | None = None,
               background: bool = False, cancelled: Cancelled | None = None) -> Any:  # fmt: skip
        """The cached result, or the run's in its queue's turn, charged to ``owner`` (a session or the warm start),
        the cache checked again once the turn comes. ``background`` work (the warm start's) runs only while no
        visitor waits, and lets one in at each of its steps; a run whose ``cancelled`` says so while it waits
        leaves the line (Unwanted)."""
        queue = shared().queue(self.queue)
        step = show or (lambda _done, _label: queue.let_others_in())
        return shared().results.get_or_run(self.cache_key, owner, lambda: self.run(step), queue, on_wait=on_wait,
                                           background=background, cancelled=cancelled)  # fmt: skip


def one_step(run: Callable[[], Any]) -> Callable[[Show], Any]:
    """A run with no steps to show, as a job runs it."""
    return lambda _show: run()


def token_limit(loaded: LoadedModel) -> int:
    return min(shared().settings.max_tokens, loaded.info.max_tokens)


def trace_job(loaded: LoadedModel, request: Request) -> Job:
    """The job that analyzes a request's text: its key holds everything the trace depends on."""
    limit = token_limit(loaded)

    def run() -> Trace:
        return analyze(loaded, request.text, max_tokens=limit, truncate=request.truncate, add_bos=request.add_bos)

    key = ("trace", request.dtype, request.text, request.add_bos, request.truncate, limit)
    return Job(request.model, key, one_step(run))


def layer_maps_job(request: Request, trace: Trace, layer: int) -> Job:
    """One layer's maps of the trace's text: that layer alone runs, from the trace's h^layer."""
    loaded, ids = request.loaded, trace.token_ids
    run = lambda: attention_maps(loaded, ids, layer, start=trace.residual[layer])  # noqa: E731
    return Job(request.model, ("maps", request.dtype, ids, layer), one_step(run))


def layer_strip_job(request: Request, trace: Trace, maps: LayerMaps, layer: int) -> Job:
    """Every head of one layer max-pooled to 64 x 64, (1, head, rows, cols): computed once per layer, not per scrub."""
    run = lambda: np.stack([pool_max(m, 64)[0] for m in maps.weights])[None]  # noqa: E731
    return Job(request.model, ("strip", request.dtype, trace.token_ids, layer), one_step(run))


def thumbnails_job(request: Request, token_ids: tuple[int, ...]) -> Job:
    run = lambda: thumbnails(request.loaded, token_ids, size=32)  # noqa: E731
    return Job(request.model, ("thumbnails", request.dtype, token_ids), one_step(run))


def streaming_check_job(loaded: LoadedModel, spec: str, dtype: str) -> Job:
    """The scoreboard's streaming check (``stream_plan.check``, on Python's help text): one per model and dtype,
    whatever the visitor's text, so the warm start runs it once for every scoreboard."""

    def run(show: Show) -> dict[str, float]:
        loaded.require(Can.STREAM)  # the streaming page's own refusal of a model it cannot re-position
        return stream_plan.check(loaded, between=lambda: show(0.0, ""))

    return Job(spec, ("claims_streaming", dtype), run)


def kv_check_job(loaded: LoadedModel, spec: str, dtype: str) -> Job | None:
    """The scoreboard's KV-cache check (``kv_check.check``): one per model and dtype, made by the warm start; None
    for a model whose cache is not evicted here (its claims say "not measured" quietly)."""
    if loaded.refusal(Can.EVICT_KV) is not None:
        return None
    return Job(spec, ("claims_kv", dtype), lambda show: kv_check.check(loaded, between=lambda: show(0.0, "")))


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
    loaded = cached_model(spec, dtype)
    loaded_model()
    add_bos = adds_bos_by_default(loaded.tokenizer) if has_bos(loaded.tokenizer) else None
    for example in EXAMPLES.values():
        job = trace_job(loaded, Request(spec, dtype, example["text"], add_bos, truncate=False))
        job.result(WARM_UP, background=True)
    jobs = [streaming_check_job(loaded, spec, dtype), kv_check_job(loaded, spec, dtype)]  # no text changes them
    for job in filter(None, jobs):
        job.result(WARM_UP, background=True)


def step_choices(choices: list[int]) -> list[int]:
    """The training lengths this deployment allows (hosted mode caps them)."""
    allowed = [steps for steps in choices if steps <= shared().settings.max_lab_steps]
    return allowed or choices[:1]
