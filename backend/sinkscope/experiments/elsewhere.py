"""Make a sink elsewhere (after arXiv 2605.06611): change one token's state at one layer and see whether the later
heads start parking on it, its key_sink before and after.

Three changes of h^layer[position]: "massive" gives it the first token's values in the channels that are massive on
the first token; "state" gives it the first token's whole state (what is left is its position); "scale" multiplies
its state by ``factor`` (a norm before attention undoes that for the layer itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sinkscope.core import ranges
from sinkscope.core.capture import Trace, analyze_ids, require_trace_of
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message
from sinkscope.core.models import LoadedModel, ModelInfo
from sinkscope.experiments.interventions import Intervention, _layers_within, intervene

MODES = ("state", "massive", "scale")
SCALE = 10.0  # the default factor of "scale": a state ten times its size


@dataclass(frozen=True)
class MakeSink(Intervention):
    """Change h^layer[position] (what block ``layer`` reads): the first token's values in ``channels`` (all of them
    with ``whole``), or the state times ``factor`` when neither is given."""

    position: int
    layer: int
    channels: tuple[int, ...] = ()
    factor: float = SCALE
    whole: bool = False

    def __post_init__(self) -> None:
        ranges.check("position", self.position)
        ranges.check("factor", self.factor)
        if self.position == 0:
            raise InputError("error.elsewhere_first")

    def fits(self, info: ModelInfo) -> None:
        _layers_within((self.layer,), info.n_layers - 1)

    @property
    def message(self) -> Message:
        if self.whole:
            return Message.of("iv.make_sink_state", position=self.position, layer=self.layer)
        if self.channels:
            return Message.of("iv.make_sink_massive", position=self.position, layer=self.layer, n=len(self.channels))
        return Message.of("iv.make_sink_scale", position=self.position, layer=self.layer, factor=float(self.factor))

    def edit_residual(self, index: int, hidden: torch.Tensor) -> torch.Tensor:
        if index != self.layer:
            return hidden
        if self.position >= hidden.shape[1]:
            raise InputError("error.past_end", position=self.position, last=hidden.shape[1] - 1)
        edited = hidden.clone()  # hidden: (row, token, d_model)
        if self.whole:
            edited[:, self.position] = hidden[:, 0]
        elif self.channels:
            channels = list(self.channels)
            edited[:, self.position, channels] = hidden[:, 0, channels]
        else:
            edited[:, self.position] *= self.factor
        return edited


@dataclass(frozen=True)
class SinkElsewhere:
    """key_sink of the changed token and of the first token, per layer, intact and changed."""

    change: MakeSink
    token: str
    before: np.ndarray  # (layer,): key_sink[:, position] of the intact run
    after: np.ndarray  # (layer,): ... of the changed run
    first_before: np.ndarray  # (layer,): key_sink[:, 0], intact
    first_after: np.ndarray  # (layer,): ... changed

    def mean_from_layer(self, values: np.ndarray) -> float:
        """The mean over the layers that read the changed state (``layer`` on)."""
        later = values[self.change.layer :]
        return float(np.nanmean(later)) if np.isfinite(later).any() else float("nan")

    def said(self) -> Message:
        means = {name: round(self.mean_from_layer(values), 2) for name, values in (
            ("before", self.before), ("after", self.after), ("first_before", self.first_before),
            ("first_after", self.first_after))}  # fmt: skip
        return Message.of("origins.elsewhere", token=repr(self.token), position=self.change.position,
                          layer=self.change.layer, **means)  # fmt: skip


def first_massive_channels(trace: Trace) -> tuple[int, ...]:
    """The channels flagged as massive on the first token in any layer."""
    return tuple(sorted({channel for _, token, channel, _ in trace.massive if token == 0}))


def make_sink(
    loaded: LoadedModel, trace: Trace, position: int, layer: int, mode: str = "state", factor: float = SCALE
) -> SinkElsewhere:
    """Change token ``position``'s state at h^``layer`` of ``trace``'s text and measure key_sink again."""
    trace = require_trace_of(loaded, trace)
    ranges.check_choice("mode", mode, MODES)
    channels = first_massive_channels(trace) if mode == "massive" else ()
    if mode == "massive" and not channels:
        raise InputError("error.elsewhere_no_massive")
    change = MakeSink(position, layer, channels, factor, whole=mode == "state")
    with intervene(loaded, change):
        changed = analyze_ids(loaded, list(trace.token_ids))
    return SinkElsewhere(change, trace.tokens[position], trace.key_sink[:, position], changed.key_sink[:, position],
                         trace.key_sink[:, 0], changed.key_sink[:, 0])  # fmt: skip
