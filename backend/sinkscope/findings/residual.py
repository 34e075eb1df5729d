"""Findings about the residual stream of one analysis: the massive activations, counted one way everywhere, and
whether the sink is there before them.

``massive`` is a Trace's list of (layer, token, channel, value) flags (Sun et al.'s threshold in
``core.metrics``); one activation (token, channel) is flagged once in every layer where it passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sinkscope.core.i18n import Message
from sinkscope.core.metrics import MASSIVE_ABS, MASSIVE_RATIO, nan_mean
from sinkscope.findings.words import HUGE, MOST

Flag = tuple[int, int, int, float]  # (layer, token, channel, value)


@dataclass(frozen=True)
class Massive:
    """The flagged activations of one text, as flags (one per layer) and as activations (token, channel)."""

    flags: int  # (layer, token, channel) entries over the threshold
    cells: tuple[tuple[int, int], ...]  # the distinct activations (token, channel), the ones an intervention sets
    layers: tuple[int, ...]  # the layers h^l with a flag, in order
    on_first: int  # flags on token 0
    largest: Flag  # the flag of largest magnitude
    ratio: float  # |largest| over its layer's median |h|


def massive(flags: Sequence[Flag], layers: Mapping[str, np.ndarray]) -> Massive | None:
    """The massive activations counted, or None when nothing passes the threshold."""
    if not flags:
        return None
    largest = max(flags, key=lambda flag: abs(flag[3]))
    median = float(layers["median_abs"][largest[0]])
    return Massive(
        flags=len(flags),
        cells=tuple(sorted({(token, channel) for _, token, channel, _ in flags})),
        layers=tuple(sorted({layer for layer, *_ in flags})),
        on_first=sum(token == 0 for _, token, _, _ in flags),
        largest=largest,
        ratio=abs(largest[3]) / median if median else float("inf"),
    )


def counted(found: Massive) -> Message:
    """The flags and the activations they are, in one sentence (a flag per layer, so 17 flags can be one)."""
    token, channel = found.cells[0]
    return Message.of("massive.counted", flags=found.flags, layers=len(found.layers), first=found.layers[0],
                      last=found.layers[-1], cells=len(found.cells), token=token, channel=channel,
                      on_first=found.on_first)  # fmt: skip


def threshold() -> Message:
    """Sun et al.'s threshold, as the sentences that use it state it."""
    return Message.of("massive.threshold", size=MASSIVE_ABS, ratio=MASSIVE_RATIO)


@dataclass(frozen=True)
class SinkBefore:
    """The sink in the layers that read only states with no flagged activation (layers 0 .. first - 1)."""

    first: int  # the first layer h^l with a flag
    peak: int  # the layer before it with the largest mean sink
    before: float  # that layer's mean sink
    after: float  # the mean sink of layers first .. L - 1
    huge_layer: int  # the state h^l before ``first`` whose top |h| is the largest against its median
    huge_ratio: float  # that ratio: at least HUGE means a channel is already huge there
    huge_top: float  # that state's top |h|

    @property
    def early(self) -> bool:
        """Whether a layer already spends most of its attention on the first token before any flag."""
        return self.before > MOST

    @property
    def huge(self) -> bool:
        return self.huge_ratio >= HUGE

    def said(self) -> Message:
        """Whether the sink waits for the flagged activations, and how large the states before them already are."""
        key = "massive.sinks_before" if self.early else "massive.sinks_after"
        size = Message.of("massive.huge_before" if self.huge else "massive.small_before", layer=self.huge_layer,
                          top=round(self.huge_top), ratio=round(self.huge_ratio), huge=HUGE)  # fmt: skip
        return Message.of(key, last=self.first - 1, first=self.first, peak=self.peak, before=round(self.before, 2),
                          after=round(self.after, 2), size=size, threshold=threshold())  # fmt: skip


def sink_before(heads: Mapping[str, np.ndarray], layers: Mapping[str, np.ndarray], first: int) -> SinkBefore | None:
    """Where the sink stands before the first flagged activation (None when h^0 is already flagged)."""
    if first == 0:
        return None
    per_layer = nan_mean(heads["sink"], axis=1)  # (layer,)
    peak = int(np.nanargmax(per_layer[:first]))
    ratios = np.asarray(layers["top1"][:first]) / np.maximum(np.asarray(layers["median_abs"][:first]), 1e-12)
    huge_layer = int(np.argmax(ratios))
    return SinkBefore(first, peak, float(per_layer[peak]), float(np.nanmean(per_layer[first:])), huge_layer,
                      float(ratios[huge_layer]), float(layers["top1"][huge_layer]))  # fmt: skip
