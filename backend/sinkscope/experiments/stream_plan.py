"""A streaming comparison as typed records: what to stream (``StreamSetup``), in which jobs (``plan``), and what
came back (``StreamResults``), so a page or a script runs the methods without knowing how they batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sinkscope.core.loss import perplexity
from sinkscope.core.models import LoadedModel
from sinkscope.core.texts import builtin_text
from sinkscope.experiments.streaming import MethodsProgress, method_cache, stream_methods, streaming_nll

ONE_PASS = ("dense", "mask-window", "mask-sinks")  # a single forward pass each: their curves show at once
REAL_CACHE = ("window", "sinks")  # the rolling cache: both methods stream side by side as one batch


@dataclass(frozen=True)
class StreamSetup:
    """One comparison: every bounded method holds ``sinks`` + ``window`` tokens of a ``tokens``-token text."""

    sinks: int
    window: int
    tokens: int
    methods: tuple[str, ...]

    @property
    def cache_size(self) -> int:
        return self.sinks + self.window

    def fills(self) -> bool:
        """Whether the text outgrows the cache; if not, every method is the dense pass."""
        return self.tokens > self.cache_size


@dataclass(frozen=True)
class StreamJob:
    """Methods that run together: one one-pass method, the real-cache methods as one batch, or recompute."""

    methods: tuple[str, ...]

    @property
    def streams(self) -> bool:
        """Whether it steps through the text a token at a time (long, with progress) rather than in one pass."""
        return self.methods[0] not in ONE_PASS


def plan(setup: StreamSetup) -> list[StreamJob]:
    """The run order: the one-pass methods first (their curves show at once), then the real cache, then recompute."""
    together = tuple(m for m in setup.methods if m in REAL_CACHE)
    return (
        [StreamJob((m,)) for m in setup.methods if m in ONE_PASS]
        + ([StreamJob(together)] if together else [])
        + [StreamJob((m,)) for m in setup.methods if m == "recompute"]
    )


def run_job(
    loaded: LoadedModel, ids: list[int], job: StreamJob, setup: StreamSetup, progress: MethodsProgress | None = None
) -> dict[str, np.ndarray]:
    """{method: per-token NLL} of one job; ``progress({method: NLL so far}, total)`` after each token of a long one."""
    if job.methods[0] in REAL_CACHE:
        return stream_methods(loaded, ids, job.methods, setup.sinks, setup.window, progress)
    method = job.methods[0]
    report = None if progress is None else lambda done, total: progress({method: done}, total)
    return {method: streaming_nll(loaded, ids, method, setup.sinks, setup.window, report)}


@dataclass(frozen=True)
class MethodRow:
    """One method's line of the results table."""

    method: str
    sinks: int  # the sinks it actually holds
    window: int  # and its recent window
    scored: int  # tokens with a loss so far
    perplexity: float
    seconds: float | None  # None: stopped before it finished


@dataclass
class StreamResults:
    """What a run has so far: a stop keeps the curves that finished or grew."""

    setup: StreamSetup
    curves: dict[str, list[float]] = field(default_factory=dict)  # method -> NLL per token
    seconds: dict[str, float] = field(default_factory=dict)  # method -> wall seconds, once finished

    def rows(self) -> list[MethodRow]:
        setup = self.setup
        return [
            MethodRow(method, *method_cache(method, setup.sinks, setup.window, setup.tokens), len(nll),
                      perplexity(np.asarray(nll)), self.seconds.get(method))
            for method, nll in self.curves.items()
        ]  # fmt: skip


CHECK = StreamSetup(sinks=4, window=60, tokens=512, methods=("dense", "mask-window", "mask-sinks"))  # course, claims
CHECK_NAMES = {"dense": "dense", "mask-window": "window", "mask-sinks": "sinks"}  # method -> the check's name


def check(
    loaded: LoadedModel, setup: StreamSetup = CHECK, between: Callable[[], None] = lambda: None
) -> dict[str, float]:
    """{dense, window, sinks: perplexity} on Python's help text, by the one-pass mask engines (fast, labelled as
    such): the window holds the last ``cache_size`` tokens, sinks hold the first ``sinks`` plus the last ``window``.
    ``between`` is called after each method (the warm start lets visitors in there)."""
    ids = loaded.tokenizer(builtin_text(), add_special_tokens=False)["input_ids"][: setup.tokens]
    found = {}
    for method in setup.methods:
        found[CHECK_NAMES[method]] = perplexity(streaming_nll(loaded, ids, method, setup.sinks, setup.window))
        between()
    return found


def link_values(setup: StreamSetup = CHECK) -> dict[str, str]:
    """The streaming page's settings that run ``setup`` (a link from the course opens the page on its check)."""
    return {"tokens": str(setup.tokens), "sinks": str(setup.sinks), "window": str(setup.window),
            "methods": ",".join(setup.methods)}  # fmt: skip


def check_values(setup: StreamSetup = CHECK) -> dict[str, int]:
    """The declared sizes a sentence about the check states: text length, cache, sinks and their recent window."""
    return {"tokens": setup.tokens, "cache": setup.cache_size, "sinks": setup.sinks, "window": setup.window}
