"""Array helpers the engine and the figures share. numpy only: importing this loads no torch.

Long maps are shown max-pooled, so one strong cell never disappears::

    >>> import numpy as np
    >>> pooled, rows, cols = pool_max(np.eye(6), 3)    # 6 x 6 -> 3 x 3, bins start at rows 0, 2, 4
    >>> pooled.tolist(), rows.tolist()
    ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], [0, 2, 4])
"""

from __future__ import annotations

import numpy as np


def bin_starts(length: int, max_bins: int) -> np.ndarray:
    """The first index of each of at most ``max_bins`` near-equal bins over ``length`` positions."""
    n_bins = max(1, min(length, max_bins))
    return np.unique((np.arange(n_bins) * length) // n_bins)


def bin_index(length: int, max_bins: int) -> np.ndarray:
    """(length,): the bin of ``bin_starts`` each position falls in."""
    return np.searchsorted(bin_starts(length, max_bins), np.arange(length), side="right") - 1


def pool_max(
    matrix: np.ndarray, max_rows: int, max_cols: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Max-pool a (rows, cols) matrix to at most max_rows x max_cols (default square); NaN-aware.

    Returns the pooled matrix and, per axis, the first index of every bin.
    """
    rows, cols = matrix.shape
    row_starts = bin_starts(rows, max_rows)
    col_starts = bin_starts(cols, max_rows if max_cols is None else max_cols)
    filled = np.where(np.isnan(matrix), -np.inf, matrix)
    pooled = np.maximum.reduceat(np.maximum.reduceat(filled, row_starts, axis=0), col_starts, axis=1)
    return np.where(np.isinf(pooled), np.nan, pooled), row_starts, col_starts


def bin_labels(starts: np.ndarray, length: int, labels: list[str]) -> list[str]:
    """One label per bin: the token label when a bin holds one token, else ``first-last``."""
    ends = np.append(starts[1:], length) - 1
    return [labels[s] if s == e else f"{s}–{e}" for s, e in zip(starts, ends, strict=True)]


def cache_band(n_tokens: int, sinks: int, window: int) -> np.ndarray:
    """(query, key) bool: the keys a sinks + window cache holds when it predicts after each query."""
    t = np.arange(n_tokens)
    distance = t[:, None] - t[None, :]  # (query, key)
    return (distance >= 0) & ((distance < window) | (t[None, :] < sinks))
