"""The numbers of docs/metrics.md as pure functions: arrays in, new arrays out, inputs never mutated.

``head_scores`` works from full attention maps: the reference the fast, chunked reduction in
``sinkscope.core.attention`` is tested against, and the path for maps recomputed on demand. numpy only::

    >>> import numpy as np
    >>> maps = np.zeros((2, 4, 4))                     # (head, query_pos, key_pos)
    >>> maps[0, :, 0] = 1                              # head 0 puts every query on the first token
    >>> maps[1] = np.eye(4)                            # head 1 attends to itself
    >>> scores = head_scores(maps)
    >>> scores["sink"].tolist(), scores["diagonal"].tolist()
    ([1.0, 0.0], [0.0, 1.0])
    >>> head_kinds(scores["sink"], scores["diagonal"], scores["previous_token"]).tolist()
    ['sink', 'diagonal']
    >>> sink_rate(scores["sink"], eps=0.3)             # percent of heads above eps
    50.0
"""

from __future__ import annotations

import warnings

import numpy as np

from sinkscope.core.names import DEFAULT_EPS, HEAD_METRICS, KIND_THRESHOLD, LABELLED_KINDS, Kind

MASSIVE_ABS = 100.0
MASSIVE_RATIO = 1000.0
BUCKETS = 1 << 15  # the top 16 bits of a float32 >= 0


def nan_mean(values: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """np.nanmean, quietly NaN for an all-NaN slice (a one-token text has no query in Q)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def head_scores(
    maps: np.ndarray, value_norms: np.ndarray | None = None, window: int | None = None
) -> dict[str, np.ndarray]:
    """Per-head metrics from maps (head, query_pos, key_pos); value_norms is (head, key_pos).

    ``window`` is a sliding-window size: entropy is normalized by the keys a query can see.
    """
    a = np.asarray(maps, dtype=np.float64)
    n_heads, n_tokens, _ = a.shape
    if n_tokens < 2:  # Q is empty: no query has a choice to make
        return {name: np.full(n_heads, np.nan) for name in HEAD_METRICS}
    t = np.arange(1, n_tokens)  # Q: every query except row 0
    visible = t + 1 if window is None else np.minimum(t + 1, window)
    rows = a[:, t, :]  # (head, query in Q, key_pos)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1.0)), 0.0)
        entropy = -plogp.sum(-1) / np.where(visible > 1, np.log(visible), 1.0)
    scores = {
        "sink": rows[:, :, 0].mean(-1),
        "diagonal": a[:, t, t].mean(-1),
        "previous_token": a[:, t[1:], t[1:] - 1].mean(-1) if n_tokens >= 3 else np.full(n_heads, np.nan),
        "entropy": entropy.mean(-1),
        "value_sink": np.full(n_heads, np.nan),
        "learned_sink": (1 - rows.sum(-1)).mean(-1),  # what a learned sink logit took: rows sum to less than one
    }
    if value_norms is not None:
        n = np.asarray(value_norms, dtype=np.float64)[:, None, :]  # (head, 1, key_pos)
        read = (rows * n).sum(-1)
        scores["value_sink"] = (rows[:, :, 0] * n[:, :, 0] / read).mean(-1)
    return scores


def has_learned_sinks(heads: dict[str, np.ndarray]) -> bool:
    """Whether some head gave mass to a learned sink logit (gpt-oss); with plain softmax every head gives 0."""
    return bool(np.nanmax(np.asarray(heads["learned_sink"], dtype=float), initial=0.0) > 0)


def shown_metrics(heads: dict[str, np.ndarray]) -> list[str]:
    """The per-head metrics worth showing for this model: ``learned_sink`` only where it is not 0 everywhere."""
    return [m for m in HEAD_METRICS if m != "learned_sink" or has_learned_sinks(heads)]


def head_kinds(sink: np.ndarray, diagonal: np.ndarray, previous_token: np.ndarray) -> np.ndarray:
    """``sink``/``diagonal``/``previous_token`` where that score is the largest and >= 0.5, else ``mixed``."""
    stacked = np.stack([sink, diagonal, np.nan_to_num(previous_token, nan=-1.0)])  # (kind, ...)
    best = stacked.argmax(0)
    kinds = np.array([str(kind) for kind in LABELLED_KINDS], dtype=object)[best]
    return np.where(stacked.max(0) >= KIND_THRESHOLD, kinds, str(Kind.MIXED)).astype(object)


def sink_rate(sink: np.ndarray, eps: float = DEFAULT_EPS) -> float:
    """Percentage of heads (all layers) whose sink score is above eps (Gu et al. 2025); a hybrid's layers without
    attention (NaN) have no heads to count."""
    sink = np.asarray(sink)
    heads = np.isfinite(sink)
    return float(100.0 * (sink[heads] > eps).sum() / heads.sum()) if heads.any() else float("nan")


def prefix_sink(first_key: np.ndarray, lengths: list[int] | np.ndarray) -> np.ndarray:
    """Sink scores of the first P tokens for each P in ``lengths``: (length, ...) from the first-key column
    (..., query_pos), since under a causal mask row t is the same whatever follows it."""
    column = np.asarray(first_key, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=int)
    if lengths.size and (lengths.min() < 2 or lengths.max() > column.shape[-1]):
        raise ValueError(f"prefix lengths must be 2 .. {column.shape[-1]}")
    totals = np.cumsum(column[..., 1:], axis=-1)  # (..., query_pos - 1): sum of rows 1 .. t
    return np.moveaxis(totals[..., lengths - 2] / (lengths - 1), -1, 0)  # (length, ...)


def key_sink_of_sums(sums: np.ndarray, n_heads: int) -> np.ndarray:
    """key_sink (..., key) from the sums over heads and later queries of A[t, j] (..., key): each divided by the
    pairs it counts, NaN for the last key (no query comes after it)."""
    n_keys = sums.shape[-1]
    pairs = n_heads * np.arange(n_keys - 1, -1, -1, dtype=np.float64)  # heads x queries t > j
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, sums / pairs, np.nan)


def key_sink(maps: np.ndarray) -> np.ndarray:
    """key_sink (key,) of one layer's maps (head, query, key): the attention each key receives from the queries
    after it, averaged over heads and those queries."""
    below = np.tril(maps.astype(np.float64).sum(0), k=-1).sum(0)  # (key,): rows t > j only
    return key_sink_of_sums(below, maps.shape[0])


def unit_rows(h: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; zero rows stay zero."""
    norms = np.linalg.norm(h, axis=-1, keepdims=True)
    return h / np.where(norms > 0, norms, 1)


def token_cosine(h: np.ndarray, scaled: bool = False) -> float:
    """Mean cosine over pairs t != s of Q; ``scaled`` first divides each channel by its RMS over Q.

    Scaling without centring keeps oversmoothing visible: z-scoring would pin the mean near -1/(n-1).
    A float32 h is worked in float32 and summed in float64 (a float64 copy costs more than the sums).
    """
    x = np.asarray(h)[1:]  # (token in Q, channel)
    x = x if x.dtype == np.float32 else x.astype(np.float64)
    n = x.shape[0]
    if n < 2:
        return float("nan")
    if scaled:
        rms = np.sqrt((x * x).mean(0, dtype=np.float64)).astype(x.dtype)
        x = np.where(rms > 0, x / np.where(rms > 0, rms, 1), 0).astype(x.dtype, copy=False)
    total = unit_rows(x).sum(0, dtype=np.float64)
    # sum over ordered pairs t != s of u_t . u_s = |sum u|^2 - sum |u_t|^2, and |u_t| = 1 (or 0)
    nonzero = np.count_nonzero(np.linalg.norm(x, axis=-1))
    return float((total @ total - nonzero) / (n * (n - 1)))


def bos_cosine(h: np.ndarray) -> float:
    """Mean over t in Q of cos(h[0], h[t]): on what attention reads, the half-space condition for a sink."""
    u = unit_rows(np.asarray(h))
    # einsum, not BLAS: OpenBLAS's threads would spin on the cores the other layers' metrics use
    return float(np.einsum("tc,c->t", u[1:], u[0]).mean(dtype=np.float64)) if len(u) > 1 else float("nan")


def massive_activations(h: np.ndarray, median_abs: float) -> list[tuple[int, int, float]]:
    """(token, channel, value) where |h| > 100 and >= 1000 x the median |h| (Sun et al. 2024), largest first."""
    magnitude = np.abs(h)
    tokens, channels = np.nonzero((magnitude > MASSIVE_ABS) & (magnitude >= MASSIVE_RATIO * median_abs))
    order = np.argsort(-magnitude[tokens, channels])
    return [(int(tokens[i]), int(channels[i]), float(h[tokens[i], channels[i]])) for i in order]


def ranked(values: np.ndarray, runs: list[tuple[int, int]]) -> list[np.ndarray]:
    """For each run (first, last) of ranks (0 = smallest), the values of float32 values >= 0 at those ranks,
    exactly as a sort would give them.

    Non-negative floats order like their bit patterns, so a histogram of the top 16 bits finds the buckets
    that hold a run, and only the values in those few buckets get sorted: three times faster than a partition.
    """
    flat = np.ascontiguousarray(values, dtype=np.float32).ravel()
    bucket = flat.view(np.int32) >> 16  # 0 .. BUCKETS - 1: sign bit 0, exponent, 7 bits of mantissa
    ends = np.bincount(bucket, minlength=BUCKETS).cumsum()  # values in the buckets up to each one
    found = []
    for first, last in runs:
        low, high = np.searchsorted(ends, [first, last], side="right")
        below = int(ends[low - 1]) if low else 0
        inside = np.sort(flat[(bucket >= low) & (bucket <= high)])  # consecutive ranks leave no gap between
        found.append(inside[first - below : last - below + 1])
    return found


def median_and_top3(magnitude: np.ndarray) -> tuple[float, np.ndarray]:
    """numpy's median (mean of the two middle values) and the three largest of float32 values >= 0."""
    n = magnitude.size
    middle, top = ranked(magnitude, [((n - 1) // 2, n // 2), (max(n - 3, 0), n - 1)])
    largest = np.full(3, np.nan)
    largest[: top.size] = top[::-1]
    return float(middle.astype(np.float64).mean()), largest


def layer_scores(h: np.ndarray) -> dict[str, object]:
    """Per-layer metrics of one hidden state h^l (token, channel); ``bos_cosine`` needs the model's norm
    (what attention reads of h^l), so ``sinkscope.core.capture`` adds it."""
    h = np.asarray(h, dtype=np.float32)
    median_abs, top = median_and_top3(np.abs(h))
    massive = massive_activations(h, median_abs) if top[0] > MASSIVE_ABS else []
    norms = np.linalg.norm(h, axis=-1)
    median_norm = float(np.median(norms))
    return {
        "top1": float(top[0]),
        "top2": float(top[1]),
        "top3": float(top[2]),
        "median_abs": median_abs,
        "massive": len(massive),
        "massive_list": massive,
        "first_norm_ratio": float(norms[0]) / median_norm if median_norm > 0 else float("nan"),
        "token_cosine": token_cosine(h),
        "token_cosine_scaled": token_cosine(h, scaled=True),
        "bos_cosine_raw": bos_cosine(h),
    }


def without_first_keys(maps: np.ndarray, k: int = 1) -> np.ndarray:
    """Attention with the first ``k`` keys removed and each row renormalized over the rest.

    Rows that put all their weight on the removed keys (and rows with no other key) become NaN:
    their distribution over the remaining keys is undefined, not zero.
    """
    rest = np.asarray(maps, dtype=np.float64)[..., k:]
    total = rest.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, rest / np.where(total > 0, total, 1.0), np.nan)


def value_weighted(maps: np.ndarray, value_norms: np.ndarray) -> np.ndarray:
    """A[t,j] n_j normalized per row: where each query's output actually comes from."""
    weighted = np.asarray(maps, dtype=np.float64) * np.asarray(value_norms, dtype=np.float64)[..., None, :]
    total = weighted.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, weighted / np.where(total > 0, total, 1.0), np.nan)


def value_norm_ratio(value_norms: np.ndarray) -> np.ndarray:
    """n_0 / median_{j>=1} n_j per head: how little (or much) the first token's value would write."""
    norms = np.asarray(value_norms, dtype=np.float64)
    if norms.shape[-1] < 2:
        return np.full(norms.shape[:-1], np.nan)
    return norms[..., 0] / np.median(norms[..., 1:], axis=-1)


def value_scaled(maps: np.ndarray, value_norms: np.ndarray) -> np.ndarray:
    """A[t,j] n_j / median_{j>=1} n_j: what each key contributes, in units of a typical token's value.

    Unlike ``value_weighted`` the rows keep their size, so a head that attends only to a sink whose
    value is tiny shows a faint row: it attends, but writes almost nothing.
    """
    norms = np.asarray(value_norms, dtype=np.float64)
    typical = np.median(norms[..., 1:], axis=-1, keepdims=True) if norms.shape[-1] > 1 else norms
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(maps, dtype=np.float64) * (norms / typical)[..., None, :]


def value_scaled_past(maps: np.ndarray, value_norms: np.ndarray, k: int = 1) -> np.ndarray:
    """``value_scaled`` of the attention past the first ``k`` keys: the rows renormalized over keys k.. as
    ``without_first_keys`` does, in the same unit (a typical token's value, the median over keys 1..)."""
    norms = np.asarray(value_norms, dtype=np.float64)
    typical = np.median(norms[..., 1:], axis=-1, keepdims=True) if norms.shape[-1] > 1 else norms
    with np.errstate(invalid="ignore", divide="ignore"):
        return without_first_keys(maps, k) * (norms[..., k:] / typical)[..., None, :]


def softmax(scores: np.ndarray) -> np.ndarray:
    """e^{x_i} / sum_j e^{x_j} over the last axis: every row spends exactly one unit."""
    x = np.asarray(scores, dtype=np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sink_logit_softmax(scores: np.ndarray, sink_logit: float) -> np.ndarray:
    """e^{x_i} / (e^s + sum_j e^{x_j}) (gpt-oss): a silent extra key with logit s absorbs the rest."""
    x = np.asarray(scores, dtype=np.float64)
    with_sink = np.concatenate([np.full(x.shape[:-1] + (1,), float(sink_logit)), x], axis=-1)
    return softmax(with_sink)[..., 1:]


def softmax_plus_one(scores: np.ndarray) -> np.ndarray:
    """e^{x_i} / (1 + sum_j e^{x_j}) (Miller 2023): the sink logit fixed at 0."""
    return sink_logit_softmax(scores, 0.0)


def sigmoid_attention(scores: np.ndarray, bias: float = 0.0) -> np.ndarray:
    """1 / (1 + e^{-(x_i + b)}): no normalization, so a row may spend anything from 0 to T."""
    return 1.0 / (1.0 + np.exp(-(np.asarray(scores, dtype=np.float64) + bias)))


def withheld_mass(weights: np.ndarray) -> np.ndarray:
    """1 - the row sum: what a row leaves unread (0 for softmax; negative when sigmoid overspends)."""
    return 1.0 - np.asarray(weights, dtype=np.float64).sum(-1)
