"""The numbers of shared/metrics.md as pure functions: arrays in, new arrays out, inputs never mutated.

``head_scores`` works from full attention maps: the reference the fast, chunked reduction in
``backend.attention`` is tested against, and the path for maps recomputed on demand.
"""

from __future__ import annotations

import numpy as np

HEAD_METRICS = ("sink", "diagonal", "previous_token", "entropy", "value_sink")
KINDS = ("sink", "diagonal", "previous_token", "mixed")
KIND_THRESHOLD = 0.5
DEFAULT_EPS = 0.3
MASSIVE_ABS = 100.0
MASSIVE_RATIO = 1000.0


def head_scores(
    maps: np.ndarray, value_norms: np.ndarray | None = None, window: int | None = None
) -> dict[str, np.ndarray]:
    """Per-head metrics from maps (head, query_pos, key_pos); value_norms is (head, key_pos).

    ``window`` is a sliding-window size: entropy is normalized by the keys a query can see.
    """
    a = np.asarray(maps, dtype=np.float64)
    n_heads, n_tokens, _ = a.shape
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
    }
    if value_norms is not None:
        n = np.asarray(value_norms, dtype=np.float64)[:, None, :]  # (head, 1, key_pos)
        read = (rows * n).sum(-1)
        scores["value_sink"] = (rows[:, :, 0] * n[:, :, 0] / read).mean(-1)
    return scores


def head_kinds(sink: np.ndarray, diagonal: np.ndarray, previous_token: np.ndarray) -> np.ndarray:
    """``sink``/``diagonal``/``previous_token`` where that score is the largest and >= 0.5, else ``mixed``."""
    stacked = np.stack([sink, diagonal, np.nan_to_num(previous_token, nan=-1.0)])  # (kind, ...)
    best = stacked.argmax(0)
    kinds = np.array(KINDS[:3], dtype=object)[best]
    return np.where(stacked.max(0) >= KIND_THRESHOLD, kinds, "mixed").astype(object)


def sink_rate(sink: np.ndarray, eps: float = DEFAULT_EPS) -> float:
    """Percentage of heads (all layers) whose sink score is above eps (Gu et al. 2025)."""
    sink = np.asarray(sink)
    return float(100.0 * (sink > eps).sum() / sink.size)


def unit_rows(h: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; zero rows stay zero."""
    norms = np.linalg.norm(h, axis=-1, keepdims=True)
    return h / np.where(norms > 0, norms, 1.0)


def token_cosine(h: np.ndarray, standardize: bool = False) -> float:
    """Mean cosine over pairs t != s of Q; ``standardize`` first z-scores each channel over Q."""
    x = np.asarray(h, dtype=np.float64)[1:]  # (token in Q, channel)
    n = x.shape[0]
    if n < 2:
        return float("nan")
    if standardize:
        std = x.std(0)
        x = np.where(std > 0, (x - x.mean(0)) / np.where(std > 0, std, 1.0), 0.0)
    u = unit_rows(x)
    total = u.sum(0)
    # sum over ordered pairs t != s of u_t . u_s = |sum u|^2 - sum |u_t|^2
    pair_sum = total @ total - (u * u).sum()
    return float(pair_sum / (n * (n - 1)))


def bos_cosine(h: np.ndarray) -> float:
    """Mean over t in Q of cos(h[0], h[t])."""
    u = unit_rows(np.asarray(h, dtype=np.float64))
    return float((u[1:] @ u[0]).mean()) if len(u) > 1 else float("nan")


def massive_activations(h: np.ndarray, median_abs: float) -> list[tuple[int, int, float]]:
    """(token, channel, value) where |h| > 100 and >= 1000 x the median |h| (Sun et al. 2024)."""
    magnitude = np.abs(h)
    tokens, channels = np.nonzero((magnitude > MASSIVE_ABS) & (magnitude >= MASSIVE_RATIO * median_abs))
    order = np.argsort(-magnitude[tokens, channels])
    return [(int(tokens[i]), int(channels[i]), float(h[tokens[i], channels[i]])) for i in order]


def layer_scores(h: np.ndarray) -> dict[str, object]:
    """Per-layer residual-stream metrics of one hidden state (token, channel)."""
    h = np.asarray(h, dtype=np.float32)
    magnitude = np.abs(h).ravel()
    top = np.sort(np.partition(magnitude, -3)[-3:])[::-1] if magnitude.size >= 3 else np.sort(magnitude)[::-1]
    median_abs = float(np.median(magnitude))
    norms = np.linalg.norm(h.astype(np.float64), axis=-1)
    massive = massive_activations(h, median_abs)
    return {
        "top1": float(top[0]),
        "top2": float(top[1]) if top.size > 1 else float("nan"),
        "top3": float(top[2]) if top.size > 2 else float("nan"),
        "median_abs": median_abs,
        "massive": len(massive),
        "massive_list": massive,
        "first_norm_ratio": float(norms[0] / np.median(norms)) if np.median(norms) > 0 else float("nan"),
        "token_cosine": token_cosine(h),
        "token_cosine_std": token_cosine(h, standardize=True),
        "bos_cosine": bos_cosine(h),
    }
