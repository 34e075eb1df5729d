"""Where attention goes besides the first token: the keys that receive most, and the secondary sinks (Wong et al.
2025) with the MLP write that made each (docs/metrics.md, "Where attention goes, and where a sink is made").

Every threshold is named here once; the pages, the command line and the scoreboard call these functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sinkscope.core.capture import Trace, require_trace
from sinkscope.core.i18n import Message, states
from sinkscope.core.names import DEFAULT_EPS

SINK_LIKE = 0.9  # |cos(h^l[j], h^l[0])| over this: token j's state is sink-like in layer l
RAISED = 2.0  # the first token's norm is raised in h^l when first_norm_ratio is over this (twice the median token's)
PAPER_DEPTH = 40  # the paper's lifetime bounds were set for models of 40 layers and more
PAPER_SHORTEST = 4  # a secondary sink lives more than 4 layers ...
PAPER_SPARE = 15  # ... and fewer than L - 15


@dataclass(frozen=True)
class Receiver:
    """A key and how much of one layer's attention it receives."""

    layer: int
    position: int
    token: str
    key_sink: float

    def said(self) -> Message:
        return Message.of("origins.receiver", token=repr(self.token), position=self.position,
                          share=round(self.key_sink, 2), layer=self.layer)  # fmt: skip


def receivers(trace: Trace, n: int, skip_first: bool = True) -> list[Receiver]:
    """The ``n`` (layer, key) cells of ``trace.key_sink`` that receive most, largest first; with ``skip_first``
    the first token's column is left out (where else does attention go?)."""
    shares = np.array(trace.key_sink, dtype=np.float64)  # (layer, token)
    if skip_first:
        shares[:, 0] = np.nan
    flat = np.nan_to_num(shares, nan=-np.inf).ravel()
    best = [i for i in np.argsort(-flat)[:n] if np.isfinite(flat[i])]
    cells = [np.unravel_index(i, shares.shape) for i in best]
    return [Receiver(int(layer), int(j), trace.tokens[j], float(shares[layer, j])) for layer, j in cells]


@dataclass(frozen=True)
class SecondarySink:
    """A token j >= 1 whose state stays sink-like over consecutive raised layers."""

    position: int
    token: str
    first: int  # h^first .. h^last: the run of sink-like states
    last: int
    key_sink: float  # mean of key_sink[l, j] over the layers that read those states
    mlp_norm: float  # ||m[j]|| of the block that wrote h^first (the write that made it)
    mlp_cos: float  # that write's cosine with the first token's state h^first[0]

    @property
    def lifetime(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class Secondary:
    """The secondary sinks of one text, and the window and bounds they were found in."""

    raised: tuple[tuple[int, int], ...]  # (first, last) of each run of layers h^l with the first token's norm raised
    bounds: tuple[float, float]  # the paper's lifetime bounds rescaled to this depth (more than / fewer than)
    sinks: tuple[SecondarySink, ...]  # every sink-like run, longest first

    @property
    def within(self) -> tuple[SecondarySink, ...]:
        """The runs whose lifetime lies within the bounds: the paper's secondary sinks."""
        low, high = self.bounds
        return tuple(sink for sink in self.sinks if low < sink.lifetime < high)

    def said(self) -> Message:
        low, high = self.bounds
        spans = states(self.raised)
        if not self.within:
            return Message.of("origins.no_secondary", spans=spans, low=round(low, 1), high=round(high, 1),
                              found=len(self.sinks), like=SINK_LIKE)  # fmt: skip
        best = self.within[0]
        return Message.of("origins.secondary", n=len(self.within), token=repr(best.token), position=best.position,
                          first=best.first, last=best.last, lifetime=best.lifetime, share=round(best.key_sink, 2),
                          low=round(low, 1), high=round(high, 1), spans=spans, like=SINK_LIKE,
                          tied=self.tied)  # fmt: skip

    @property
    def tied(self) -> int:
        """How many of the paper's secondary sinks share the longest lifetime (the first takes most attention)."""
        return sum(sink.lifetime == self.within[0].lifetime for sink in self.within)


@dataclass(frozen=True)
class SinkPhases:
    """Where the first token is a sink, layer by layer: every run of layers whose mean sink passes eps, and where
    the first token's largest massive activation first appears (``h^massive_from``), to say which comes first."""

    phases: tuple[tuple[int, int], ...]  # (first, last) layers of each run with a mean sink above eps
    massive_from: int | None  # the first h^l with a massive activation on the first token; None: there is none

    @property
    def onset(self) -> int | None:
        """The first layer that sinks: it reads h^onset, which blocks 0 .. onset - 1 built."""
        return self.phases[0][0] if self.phases else None

    def said(self) -> Message:
        """Where the sink appears, in phases, and whether the massive activation comes before or after it."""
        if self.onset is None:
            return Message.of("origins.phases_none", eps=DEFAULT_EPS)
        spans = ", ".join(f"{first}–{last}" if last > first else str(first) for first, last in self.phases)
        if self.massive_from is None:
            key = "origins.phases_no_massive"
        else:
            key = "origins.phases_massive_later" if self.massive_from > self.onset else "origins.phases_massive_first"
        built = (Message.of("origins.built_blocks", n=self.onset, last=self.onset - 1) if self.onset
                 else Message.of("origins.built_embeddings"))  # fmt: skip
        return Message.of(key, onset=self.onset, built=built, spans=spans, eps=DEFAULT_EPS,
                          massive=self.massive_from if self.massive_from is not None else -1)  # fmt: skip


def sink_phases(trace: Trace) -> SinkPhases:
    """The layers where the first token is a sink (mean ``sink`` over the layer's heads above eps, as the sink
    rate reads a head), and the first state that holds its massive activation (``trace.massive``)."""
    per_layer = np.nan_to_num(np.asarray(trace.key_sink[:, 0], dtype=np.float64))  # (layer,): each layer's mean sink
    on_first = [layer for layer, token, _, _ in trace.massive if token == 0]
    return SinkPhases(tuple(_runs(per_layer > DEFAULT_EPS)), min(on_first) if on_first else None)


def lifetime_bounds(n_layers: int) -> tuple[float, float]:
    """The paper's bounds (more than 4, fewer than L - 15 layers, for 40 layers) scaled to ``n_layers``."""
    scale = n_layers / PAPER_DEPTH
    return PAPER_SHORTEST * scale, n_layers - PAPER_SPARE * scale


def first_cosines(residual: np.ndarray) -> np.ndarray:
    """cos(h^l[t], h^l[0]) as (layer + 1, token), from the stream (layer + 1, token, d_model)."""
    states = residual.astype(np.float64)
    norms = np.linalg.norm(states, axis=-1)  # (layer + 1, token)
    return np.einsum("ltd,ld->lt", states, states[:, 0]) / np.maximum(norms * norms[:, :1], 1e-30)


def secondary_sinks(trace: Trace) -> Secondary:
    """Wong et al.'s secondary sinks in one analysis: runs of sink-like states within the raised layers."""
    raised = np.asarray(require_trace(trace).layers["first_norm_ratio"]) > RAISED  # (layer + 1,)
    like = (np.abs(first_cosines(trace.residual)) > SINK_LIKE) & raised[:, None]  # (layer + 1, token)
    sinks = [_sink(trace, j, first, last) for j in range(1, trace.n_tokens) for first, last in _runs(like[:, j])]
    sinks.sort(key=lambda sink: (-sink.lifetime, -sink.key_sink))
    return Secondary(tuple(_runs(raised)), lifetime_bounds(len(raised) - 1), tuple(sinks))


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every run of True in ``flags``, both ends included."""
    padded = np.concatenate([[False], flags, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))  # starts at even places, one past the ends at odd ones
    return [(int(start), int(stop) - 1) for start, stop in zip(edges[::2], edges[1::2], strict=True)]


def _sink(trace: Trace, j: int, first: int, last: int) -> SecondarySink:
    reading = trace.key_sink[first : min(last + 1, trace.key_sink.shape[0]), j]  # layer l reads h^l
    writes = trace.writes
    made_by = first - 1  # block first - 1 wrote h^first
    mlp_norm = float(writes.mlp_norm[made_by, j]) if writes is not None and made_by >= 0 else float("nan")
    mlp_cos = float(writes.mlp_cos_first[made_by, j]) if writes is not None and made_by >= 0 else float("nan")
    key_sink = float(np.nanmean(reading)) if np.isfinite(reading).any() else float("nan")
    return SecondarySink(j, trace.tokens[j], first, last, key_sink, mlp_norm, mlp_cos)
