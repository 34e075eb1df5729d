"""Where the first token becomes a sink: what each block writes to position 0, and what removing one write does.

``first_writes`` reads a Trace's writes (docs/metrics.md, ``attn_write`` and ``mlp_write``) and finds the write that
builds the first token's largest massive activation; ``RemoveWrite`` drops one block's attention or MLP write at
position 0 only, and ``remove_write`` measures the run without it against the intact one.

Zeroing a write that puts thousands into one channel changes two things at once: the sink loses what built it, and
the first token leaves every range the model has seen. Two controls tell them apart: the write replaced by its mean
over other first tokens (a typical write, so the state stays in range), and only its massive channel zeroed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sinkscope.core import ranges
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import Trace, require_trace, run_forward
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message
from sinkscope.core.models import LoadedModel, ModelInfo
from sinkscope.core.names import DEFAULT_EPS
from sinkscope.core.writes import PARTS, Writes
from sinkscope.experiments.interventions import Intervention, Outcome, _layers_within, outcome

REMOVE_KEYS = {"attention": "iv.remove_attention_write", "mlp": "iv.remove_mlp_write"}
HOWS = ("zero", "mean", "channel")  # zeroed; replaced by its mean over other first tokens; one channel zeroed
HOW_KEYS = {"zero": "origins.how_zero", "mean": "origins.how_mean", "channel": "origins.how_channel"}
OTHER_FIRSTS = 32  # the mean write is taken over the first tokens of this many built-in documents
BUILT_KEYS = {"attention": "origins.built_by_attention", "mlp": "origins.built_by_mlp"}


def check_writes(loaded: LoadedModel, layer: int) -> None:
    """An error that says why when the model's writes cannot be read (a slow or hybrid family) or ``layer`` is
    past its last block."""
    loaded.require(Can.READ_WRITES)
    _layers_within((layer,), loaded.info.n_layers - 1)


@dataclass(frozen=True)
class RemoveWrite(Intervention):
    """Drop block ``block``'s attention or MLP write (``part``) at position 0 only; every other token keeps it."""

    block: int
    part: str
    how: str = "zero"
    channel: int | None = None  # "channel": the one channel zeroed
    mean: tuple[float, ...] | None = None  # "mean": the write put in its place (d_model values)

    def __post_init__(self) -> None:
        ranges.check_choice("part", self.part, tuple(PARTS))
        ranges.check_choice("how", self.how, HOWS)
        if (self.how == "channel") != (self.channel is not None) or (self.how == "mean") != (self.mean is not None):
            raise InputError("error.write_control", how=self.how)

    def fits(self, info: ModelInfo) -> None:
        _layers_within((self.block,), info.n_layers - 1)

    @property
    def message(self) -> Message:
        write = Message.of(REMOVE_KEYS[self.part], layer=self.block)
        return Message.of(HOW_KEYS[self.how], write=write, channel=self.channel, n=OTHER_FIRSTS)

    def edit_write(self, block: int, part: str, write: torch.Tensor) -> torch.Tensor:
        if (block, part) != (self.block, self.part):
            return write
        edited = write.clone()  # write: (row, token, d_model)
        if self.how == "channel":
            edited[:, 0, self.channel] = 0
        elif self.how == "mean":
            edited[:, 0] = torch.tensor(self.mean, dtype=write.dtype, device=write.device)
        else:
            edited[:, 0] = 0
        return edited


def other_first_tokens(loaded: LoadedModel, ids: list[int] | tuple[int, ...]) -> list[int]:
    """The first tokens of the first OTHER_FIRSTS built-in documents, without repeats or this text's own."""
    from sinkscope.census.corpus import builtin_documents

    firsts = [loaded.encode(doc, 1, truncate=True, add_bos=False)[0] for doc in builtin_documents()[:OTHER_FIRSTS]]
    return [token for token in dict.fromkeys(firsts) if token != ids[0]]


def mean_first_write(loaded: LoadedModel, block: int, part: str, first_tokens: list[int]) -> np.ndarray:
    """(d_model,): block ``block``'s ``part`` write at position 0, averaged over texts that start with each of
    ``first_tokens``; position 0 reads only itself, so its first token is all of a text it depends on."""
    check_writes(loaded, block)
    if not first_tokens:  # the mean of nothing is NaN, and would be written into the stream
        raise InputError("error.no_other_firsts")
    rows = []
    for token in first_tokens:
        recorder = loaded.recorder(reduce=False, writes=loaded.writes_buffer(1))
        run_forward(loaded, [token], recorder)
        rows.append(recorder.writes.first[PARTS.index(part), block])
    return np.mean(rows, axis=0)


def controls(loaded: LoadedModel, ids: list[int] | tuple[int, ...], block: int, part: str,
             channel: int | None) -> list[RemoveWrite]:  # fmt: skip
    """The write zeroed, replaced by its mean over other first tokens, and (with a massive ``channel``) that channel
    alone zeroed: the three removals the origins page sets side by side."""
    mean = mean_first_write(loaded, block, part, other_first_tokens(loaded, ids))
    found = [RemoveWrite(block, part), RemoveWrite(block, part, "mean", mean=tuple(map(float, mean)))]
    return found + ([RemoveWrite(block, part, "channel", channel=channel)] if channel is not None else [])


@dataclass(frozen=True)
class FirstWrites:
    """What each block writes to the first token, and which write builds its largest massive activation."""

    attn_write: np.ndarray  # (block,): ||a[0]||
    mlp_write: np.ndarray  # (block,): ||m[0]||
    channel: int | None  # the channel of the first token's largest massive activation; None: it has none
    in_channel: np.ndarray  # (part, block): each write's value in that channel (empty without one)
    peak: float  # that activation's value at its largest
    peak_layer: int  # ... in h^peak_layer
    builder: RemoveWrite | None  # the write that adds most to it, in its sign, as the change that removes it

    def said(self) -> Message:
        """Which block builds the first token's massive activation on this text, from the numbers."""
        if self.builder is None:
            return Message.of("origins.no_massive_first")
        part, block = self.builder.part, self.builder.block
        value = float(self.in_channel[PARTS.index(part), block])
        return Message.of(BUILT_KEYS[part], block=block, channel=self.channel, value=round(value),
                          peak=round(self.peak), layer=self.peak_layer)  # fmt: skip


def first_writes(trace: Trace) -> FirstWrites:
    """The first token's writes, read from an analysis (``trace.writes``)."""
    writes: Writes | None = require_trace(trace).writes
    if writes is None:  # a hybrid, slow-path or reduced-precision analysis keeps none
        raise InputError("error.trace_no_writes", model=trace.model)
    on_first = [(layer, channel, value) for layer, token, channel, value in trace.massive if token == 0]
    attn, mlp = writes.attn_write, writes.mlp_write
    if not on_first:
        return FirstWrites(attn, mlp, None, np.empty((len(PARTS), 0)), float("nan"), -1, None)
    layer, channel, peak = max(on_first, key=lambda flag: abs(flag[2]))
    in_channel = writes.first[:, :, channel]  # (part, block)
    signed = np.nan_to_num(in_channel * np.sign(peak), nan=-np.inf)
    part, block = np.unravel_index(np.argmax(signed), signed.shape)
    builder = RemoveWrite(int(block), PARTS[part])
    return FirstWrites(attn, mlp, int(channel), in_channel, float(peak), int(layer), builder)


@dataclass(frozen=True)
class WriteRemoved:
    """The run without one write at position 0, against the intact run."""

    removed: RemoveWrite
    intact: Outcome
    changed: Outcome
    eps: float

    def sink_after(self, run: Outcome) -> float:
        """The sink rate (percent of heads with ``sink`` > eps) of the blocks after the removed write."""
        later = run.heads["sink"][self.removed.block + 1 :]
        return float((later[~np.isnan(later)] > self.eps).mean() * 100) if later.size else float("nan")

    @property
    def loss_change(self) -> float:
        return self.changed.loss - self.intact.loss


def remove_write(
    loaded: LoadedModel, ids: list[int] | tuple[int, ...], block: int, part: str, eps: float = DEFAULT_EPS
) -> WriteRemoved:
    """Run the text intact and without block ``block``'s ``part`` write at position 0."""
    check_writes(loaded, block)
    ranges.check("eps", eps)
    loaded.check_length(len(ids))  # the one token limit a text meets, before any work
    removed = RemoveWrite(block, part)
    return WriteRemoved(removed, outcome(loaded, ids), outcome(loaded, ids, removed), eps)
