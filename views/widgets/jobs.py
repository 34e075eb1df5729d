"""The one way a page runs a job: found in the shared cache, or run in its model's queue (the cache checked again once
the turn comes, so visitors who ask together cost one run), with what the wait is for, a bar the run moves, a Stop
button for a long run, and the result shared by every session. A stopped run raises out of here, is never cached,
and keeps what its own progress callback wrote down (the page shows it)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import streamlit as st
from sinkscope.core.capture import LayerMaps, Trace
from sinkscope.serving.runs import Unwanted, Wait
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from views.state import cache
from views.state.session import Request, owner
from views.text import t
from views.widgets import stop_button

BAR_EVERY = 0.25  # seconds: a browser update per step would cost the model (and every other visitor) CPU
log = logging.getLogger("sinkscope.serve.jobs")  # the server's log: which jobs ran, and how long they took


def waiting_for(wait: Wait) -> str:
    """What a visitor's run waits for, in words: the server's own preparation or other visitors' runs, and for about
    how long once runs like them have been timed."""
    if wait.seconds is None:
        return t("common.wait_visitors" if wait.visitors else "common.wait_server", n=wait.visitors)
    key = "common.wait_visitors_eta" if wait.visitors else "common.wait_server_eta"
    return t(key, n=wait.visitors, s=max(1, round(wait.seconds)))


class Bar:
    """A progress bar drawn once a step first reports, at most four times a second."""

    def __init__(self) -> None:
        self.slot, self.shown = st.empty(), 0.0

    def progress(self, share: float, text: str) -> None:
        now = time.monotonic()
        if now - self.shown > BAR_EVERY:
            self.slot.progress(min(max(share, 0.0), 1.0), text=text or None)
            self.shown = now


Stop = tuple[str, str]  # a Stop button's widget key and the catalogue key of its help


@contextmanager
def _in_line(message: str, stop: Stop | None) -> Iterator[tuple[Callable[[Wait], None], Bar]]:
    """A spinner saying ``message``, a notice of what the run waits for, its bar, and a Stop for a long run."""
    notice, bar = st.empty(), Bar()
    stopping = stop_button.while_running(*stop) if stop is not None else nullcontext()
    try:
        with st.spinner(message), stopping:
            yield (lambda wait: notice.info(waiting_for(wait))), bar
    finally:
        notice.empty()
        bar.slot.empty()


def unwanted() -> bool:
    """Whether this session's visitor pressed Stop, changed a widget or page, or left since the run was asked for:
    a run still waiting in line then leaves it (Streamlit itself acts only at the script's next element)."""
    context = get_script_run_ctx(suppress_warning=True)
    requests = context.script_requests if context is not None else None
    return requests is not None and requests._state is not ScriptRequestType.CONTINUE  # no public reader


@contextmanager
def _leaving_when_unwanted() -> Iterator[None]:
    """A run that left the line: the next element lets Streamlit serve what the visitor asked for instead (the
    rerun of a Stop, a closed tab's end)."""
    try:
        yield
    except Unwanted:
        st.empty()  # raises Streamlit's own rerun or stop here
        raise


def logged(job: cache.Job) -> cache.Job:
    """The same job (the same cache entry), saying in the server's log that it ran and for how long."""

    def run(show: cache.Show) -> Any:
        started = time.monotonic()
        found = job.run(show)
        log.info("Ran %s on %s in %.1f s", job.key[0], job.queue, time.monotonic() - started)
        return found

    return cache.Job(job.queue, job.key, run)


def run(job: cache.Job, message: str, stop: Stop | None = None) -> Any:
    """The job's result for every session: the cache's, or ``job.run(show)`` in its queue's turn, where ``show``
    moves the bar and lets waiting visitors in between the run's steps; ``stop`` adds a Stop button."""
    found = cache.shared().results.get(job.cache_key)
    if found is not None:
        return found
    queue = cache.shared().queue(job.queue)
    with _in_line(message, stop) as (waiting, bar):

        def show(share: float, text: str) -> None:
            bar.progress(share, text)
            queue.let_others_in()

        with _leaving_when_unwanted():
            return logged(job).result(owner(), show, on_wait=waiting, cancelled=unwanted)


def pausing(show: cache.Show) -> tuple[cache.Show, Callable[[], None]]:
    """``show``, and a pause that calls it again with its last share and text: a run that pauses between the
    blocks of a long unit lets waiting visitors in (and meets a Stop) without moving its bar."""
    last: list = [0.0, ""]

    def shown(share: float, text: str) -> None:
        last[:] = [share, text]
        show(share, text)

    return shown, lambda: show(*last)


def run_all(jobs: list[cache.Job], message: str, on_each: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Each job's cached result, the missing ones run in one turn of their queue (the jobs share one: a page's runs
    on its model), so a page that needs several waits in line once; a job that failed leaves its exception.
    ``on_each(index, result)`` hears each result as it lands, in order (a page can show it at once)."""
    results = cache.shared().results
    found = [results.get(job.cache_key) for job in jobs]
    if all(value is not None for value in found):
        for index, value in enumerate(found if on_each is not None else ()):
            on_each(index, value)
        return found
    queue = cache.shared().queue(jobs[0].queue)
    with _in_line(message, None) as (waiting, bar):  # one turn for all: the bar moves, nobody is let in between
        runs = [(job.cache_key, lambda job=job: logged(job).run(bar.progress)) for job in jobs]
        with _leaving_when_unwanted():
            return results.get_or_run_all(runs, owner(), queue, on_each, on_wait=waiting, cancelled=unwanted)


def layer_maps(request: Request, trace: Trace, layer: int) -> LayerMaps:
    return run(cache.layer_maps_job(request, trace, layer), t("common.recomputing_layer"))


def layer_strip(request: Request, trace: Trace, layer: int) -> np.ndarray:
    """Every head of one layer max-pooled to 64 x 64, (1, head, rows, cols)."""
    maps = layer_maps(request, trace, layer)
    return run(cache.layer_strip_job(request, trace, maps, layer), t("common.recomputing_layer"))


def thumbnails(request: Request, token_ids: tuple[int, ...]) -> np.ndarray:
    return run(cache.thumbnails_job(request, token_ids), t("common.drawing_heads"))


def trace(request: Request) -> Trace:
    return run(cache.trace_job(request.loaded, request), t("common.running_model"))
