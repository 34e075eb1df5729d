"""How well a model predicts a text, in one implementation: each token's negative log-likelihood, and perplexity.
Streaming, the KV-cache lab, the lessons, the claims and the course all read it from here, and the bootstrap
intervals that say when two caches' losses differ by more than the text's own noise."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Negative log-likelihood of each target under (position, vocab) logits."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return (-log_probs.gather(-1, targets[:, None])[:, 0]).cpu().numpy()


def perplexity(nll: np.ndarray) -> float:
    """exp of the mean NLL over the last axis' tokens; NaN for no token (nothing was predicted)."""
    nll = np.asarray(nll, dtype=np.float64)
    return float(math.exp(float(nll.mean()))) if nll.size else float("nan")


BLOCK = 8  # tokens resampled together: a token's loss is not independent of its neighbours'
DRAWS = 1000
LEVEL = 0.95  # the intervals' coverage
TAILS = ((1 - LEVEL) / 2, (1 + LEVEL) / 2)  # the quantiles of the resamples that bound an interval


@dataclass(frozen=True)
class Interval:
    """A statistic on the text and its LEVEL bootstrap interval over tokens."""

    value: float
    low: float
    high: float

    def excludes(self, point: float = 0.0) -> bool:
        """The interval lies wholly on one side of ``point``: the text tells the two apart."""
        return self.low > point or self.high < point


def resample_counts(n_tokens: int, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """(draw, token): how often each token is drawn in each resample, circular blocks of BLOCK tokens drawn with
    replacement until the resample is as long as the text (a moving-block bootstrap)."""
    block = max(1, min(BLOCK, n_tokens))
    n_blocks = -(-n_tokens // block)
    starts = np.random.default_rng(seed).integers(0, n_tokens, size=(draws, n_blocks))
    drawn = (starts[..., None] + np.arange(block)).reshape(draws, -1)[:, :n_tokens] % n_tokens  # (draw, token)
    counts = np.zeros((draws, n_tokens))
    np.add.at(counts, (np.arange(draws)[:, None], drawn), 1.0)
    return counts


def resampled_means(per_token: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(..., draw): the mean of every resample of ``per_token`` (..., token) under ``counts`` (draw, token)."""
    return np.asarray(per_token, dtype=np.float64) @ counts.T / counts.shape[1]


def interval_of(value: float, samples: np.ndarray) -> Interval:
    """``value`` with the central LEVEL of its bootstrap ``samples``."""
    low, high = np.quantile(samples, TAILS)
    return Interval(float(value), float(low), float(high))


def mean_difference(nll: np.ndarray, reference: np.ndarray, seed: int = 0) -> Interval:
    """Mean nats per token of ``nll`` over ``reference`` (the log of their perplexity ratio), paired token by token."""
    difference = np.asarray(nll, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
    counts = resample_counts(difference.size, seed=seed)
    return interval_of(float(difference.mean()), resampled_means(difference, counts))
