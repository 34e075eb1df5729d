"""Findings about the heads of one analysis: kinds counted, the example heads, the sink heads that read their sink.

Each takes the per-head arrays of a Trace (``trace.heads``: metric -> (layer, head)) and returns plain data; the
sentences that state them are ``Message`` keys filled from these fields only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sinkscope.core.i18n import Message, times
from sinkscope.core.names import KIND_THRESHOLD, KINDS, Kind
from sinkscope.findings.words import READS, READS_NOTHING

Head = tuple[int, int]  # (layer, head)
Heads = Mapping[str, np.ndarray]


def strongest(heads: Heads, metric: str) -> Head:
    """The head with the largest ``metric`` (sink, diagonal): the one a slide, a step or a page shows as its example."""
    values = np.nan_to_num(np.asarray(heads[metric], dtype=np.float64), nan=-1.0)
    layer, head = np.unravel_index(values.argmax(), values.shape)
    return int(layer), int(head)


def kind_counts(kinds: np.ndarray) -> dict[str, int]:
    """How many heads carry each label (every kind present, zero included)."""
    return {kind: int((kinds == kind).sum()) for kind in KINDS}


def kind_shares(kinds: np.ndarray) -> dict[str, float]:
    """Each kind's share of all heads (a hybrid's layers without attention have none), in percent to one decimal."""
    counts = kind_counts(kinds)
    total = sum(counts.values())
    return {kind: round(100 * count / total, 1) if total else 0.0 for kind, count in counts.items()}


def kinds_seen(kinds: np.ndarray) -> Message:
    """What the thumbnails show, counted: a dark first column (sink), a dark main diagonal (the token itself) and a
    dark line just below it (the previous token) look alike at a glance; the kinds tell them apart."""
    counts = kind_counts(kinds)
    return Message.of("explorer.all_heads_help", sinks=counts[Kind.SINK], diagonals=counts[Kind.DIAGONAL],
                      previous=counts[Kind.PREVIOUS_TOKEN], threshold=KIND_THRESHOLD)  # fmt: skip


@dataclass(frozen=True)
class SinkReading:
    """What the sink heads read from the first token: value_sink against READS and READS_NOTHING."""

    sinks: int  # heads of kind sink
    reading: int  # of them, value_sink above READS: over half their output comes from the first token
    little: int  # value_sink from READS_NOTHING to READS: they read little from it
    nothing: int  # value_sink under READS_NOTHING: they read almost nothing from it
    value_ratio: float  # median over sink heads of value_norm_ratio (the first value against a typical one)
    clearest: Head | None  # the reading head with the largest sink + value_sink
    others: tuple[float, float, float]  # (min, median, max) value_sink of the heads that do not read their sink

    def said(self) -> Message:
        """The counts as one sentence: how many read their sink, how many little, how many almost nothing."""
        if not self.sinks:
            return Message.of("reads.no_sink_heads", threshold=KIND_THRESHOLD)
        if self.reading == self.sinks:
            return Message.of("reads.all_read", sinks=self.sinks, reads=READS)
        low, median, high = (round(value, 2) for value in self.others)
        return Message.of("reads.counted", sinks=self.sinks, reading=self.reading, little=self.little,
                          nothing=self.nothing, reads=READS, reads_nothing=READS_NOTHING, low=low, median=median,
                          high=high)  # fmt: skip

    def ratio(self) -> Message:
        return times(self.value_ratio)


def sink_reading(heads: Heads) -> SinkReading:
    """Counts the sink heads by how much of their output comes from the first token."""
    sinks = np.asarray(heads["kind"]) == Kind.SINK
    value_sink = np.asarray(heads["value_sink"], dtype=np.float64)
    reading = sinks & (value_sink > READS)
    nothing = sinks & (value_sink < READS_NOTHING)
    others = value_sink[sinks & ~reading]
    spread = tuple(float(f(others)) for f in (np.min, np.median, np.max)) if others.size else (np.nan,) * 3
    ratio = float(np.nanmedian(heads["value_norm_ratio"][sinks])) if sinks.any() else float("nan")
    clearest = None
    if reading.any():
        score = np.where(reading, value_sink + heads["sink"], -np.inf)
        clearest = tuple(int(i) for i in np.unravel_index(score.argmax(), score.shape))
    return SinkReading(int(sinks.sum()), int(reading.sum()), int((sinks & ~reading & ~nothing).sum()),
                       int(nothing.sum()), ratio, clearest, spread)  # fmt: skip
