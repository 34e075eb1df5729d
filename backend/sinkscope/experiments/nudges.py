"""How much more nudging token 0 moves later predictions than nudging another token: the spread over many nudges.

A nudge adds a random direction to one token's h^0. The spread nudges token 0 and three other tokens along
``DIRECTIONS`` directions each and compares the KL divergences they cause. Its runs are batched: every direction
of one position runs as rows of one forward pass, and a position past 0 reuses the intact run's keys and values
for the tokens before it (causal attention leaves them unchanged), so only the tokens a nudge can move are run.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message, times
from sinkscope.core.models import LoadedModel, check_ids
from sinkscope.experiments.interventions import Intervention, intervene, nudged

SPREAD = (10, 90)  # the percentiles a spread of ratios is told by: where 80% of them lie
DIRECTIONS = 8  # random directions a spread nudges each token in
QUARTERS = (1, 2, 3)  # ... at a quarter, half and three quarters into the text
LOGITS_BYTES = 2**28  # the float32 logits one batched forward may hold: rows are split to stay within it


@dataclass(frozen=True)
class Spread:
    """How much more token 0's nudge moves later predictions than another token's, over many nudges."""

    positions: tuple[int, ...]  # the other tokens nudged
    ratios: np.ndarray  # (direction, position): KL after nudging token 0 / KL after nudging that position

    def median(self) -> float:
        return float(np.median(self.ratios))

    def interval(self) -> tuple[float, float]:
        """The 10th and 90th percentiles: where 80% of the ratios lie."""
        low, high = np.percentile(self.ratios, SPREAD)
        return float(low), float(high)

    @property
    def share(self) -> int:
        """The percentage of ratios ``interval`` holds."""
        return SPREAD[1] - SPREAD[0]

    def place(self, ratio: float) -> Message:
        """Where one run's ratio falls against these: below, inside or above the 80% interval, with the numbers."""
        low, high = self.interval()
        where = "break.spread_below" if ratio < low else "break.spread_above" if ratio > high else "break.spread_inside"
        return Message.of("break.against_spread", directions=self.ratios.shape[0], share=self.share,
                          positions=", ".join(map(str, self.positions)), median=times(self.median()), low=times(low),
                          high=times(high), ratio=times(ratio), where=Message.of(where))  # fmt: skip


@dataclass(frozen=True)
class Nudges(Intervention):
    """``Perturb`` for a batch: row b has the token at ``at`` (counted in the tokens this forward runs) nudged by
    ``size`` along the direction drawn with ``seeds[b]``."""

    at: int
    size: float
    seeds: tuple[int, ...]

    def edit_residual(self, index: int, hidden: torch.Tensor) -> torch.Tensor:
        return nudged(hidden, self.at, self.size, self.seeds) if index == 0 else hidden


def _run(
    loaded: LoadedModel, ids: list[int], keep: int, change: Intervention, rows: int = 1, past: object = None
) -> tuple[torch.Tensor, object]:
    """Log-probabilities (row, keep, vocab) of the last ``keep`` predictions of ``rows`` copies of ``ids`` run
    after ``past`` (the cache of the tokens before them, or None), and the cache after them."""
    input_ids = torch.tensor([ids] * rows, device=loaded.model.device)  # (row, token)
    with torch.inference_mode(), intervene(loaded, change):
        out = loaded.model(input_ids=input_ids, cache=past, use_cache=True, logits_to_keep=keep)
    return torch.log_softmax(out.logits.float(), dim=-1), out.cache


def _nudged(
    loaded: LoadedModel, ids: list[int], position: int, size: float, seeds: tuple[int, ...], keep: int, past: object
) -> torch.Tensor:
    """Log-probabilities (direction, keep, vocab) with token ``position`` nudged along each seed's direction; the
    tokens before it are read from ``past`` (the intact run's cache) where that cache can be cut there."""
    if position and getattr(past, "is_croppable", False):
        prefix = copy.deepcopy(past)
        prefix.crop(position - len(ids))  # a negative count: the tokens removed from the end
        prefix.batch_repeat_interleave(len(seeds))
        return _run(loaded, ids[position:], keep, Nudges(0, size, seeds), len(seeds), prefix)[0]
    return _run(loaded, ids, keep, Nudges(position, size, seeds), len(seeds))[0]


def _batches(seeds: tuple[int, ...], keep: int, vocab: int) -> list[tuple[int, ...]]:
    """``seeds`` cut into runs whose logits fit ``LOGITS_BYTES``."""
    rows = max(1, LOGITS_BYTES // (4 * keep * vocab))
    return [seeds[i : i + rows] for i in range(0, len(seeds), rows)]


def sensitivity_spread(
    loaded: LoadedModel, ids: list[int] | tuple[int, ...], size: float, directions: int = DIRECTIONS
) -> Spread:
    """KL(intact || nudged) of the next-token predictions after nudging token 0, and after nudging a token a
    quarter, half and three quarters into the text, along ``directions`` random directions (one direction alone
    can flip the verdict). Each ratio compares the two nudges on the predictions both reach."""
    ids = list(ids)
    if len(ids) < 3:
        raise InputError("error.three_tokens")
    check_ids(loaded, ids)
    positions = tuple(sorted({max(1, min(len(ids) - 1, len(ids) * k // 4)) for k in QUARTERS}))
    start = positions[0]
    past = DynamicCache(config=loaded.model.config)
    past.activate_past_recording()  # a sliding-window layer keeps every key until it is cut, so it can be cut early
    intact, past = _run(loaded, ids, len(ids) - start, Intervention(), past=past)
    intact = intact[0]  # (prediction from start, vocab)
    probs = intact.exp()

    def kl(position: int) -> torch.Tensor:  # (direction, prediction from max(position, start)): KL per prediction
        reached = max(position, start)
        base, weights = intact[reached - start :], probs[reached - start :]
        found = []
        for seeds in _batches(tuple(range(directions)), len(ids) - reached, intact.shape[-1]):
            changed = _nudged(loaded, ids, position, size, seeds, len(ids) - reached, past)
            found.append((weights * (base - changed)).sum(-1))
        return torch.cat(found)

    first = kl(0)
    ratios = [first[:, p - start :].mean(-1) / kl(p).mean(-1).clamp_min(1e-12) for p in positions]  # (direction,) each
    return Spread(positions, torch.stack(ratios, dim=1).double().cpu().numpy())
