"""What it costs to represent a sink or a diagonal: our own measurement, not the paper's proof setting.

T unit embeddings in d dimensions, the first one the sink. Find by gradient descent the query-key matrix W
of smallest Frobenius norm for which every query t >= 1 puts at least 1 - delta of its attention (softmax
of x_t W x_j over the keys j <= t) on the first key (a sink) or on itself (a diagonal), and watch how that
norm grows with T. Súkeník et al. prove ~T for a sink and ~T^1.5 for a diagonal in their setting; here the
embeddings are fixed unit vectors, so the numbers answer "how large must W be" for these vectors only.

- ``aligned``: the others share a component and the first token points the other way (the half-space
  condition under which a sink is representable);
- ``random``: every embedding uniform on the sphere, no alignment.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from sinkscope.core import ranges
from sinkscope.core.i18n import Message, times
from sinkscope.core.names import COST_LENGTHS
from sinkscope.findings import words

LENGTHS = COST_LENGTHS
PATTERNS = ("sink", "diagonal")
GEOMETRIES = ("aligned", "random")
SAYS_KEYS = {"sink": "cost.says_cheaper", "diagonal": "cost.says_dearer", "same": "cost.says_same"}
GROWTH_KEYS = {"flat": "cost.flat", "varies": "cost.varies", "grows": "cost.grows", "falls": "cost.falls"}


def embeddings(n_tokens: int, dim: int, geometry: str, seed: int = 0, noise: float = 0.5) -> torch.Tensor:
    """(token, dim) unit rows; row 0 is the sink token."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, dim, generator=generator, dtype=torch.float64)
    if geometry == "aligned":
        shared = torch.zeros(dim, dtype=torch.float64)
        shared[0] = 1.0
        x = shared + noise * x / math.sqrt(dim)  # every token near the shared direction ...
        x[0] = -shared + noise * torch.randn(dim, generator=generator, dtype=torch.float64) / math.sqrt(dim)
    return x / x.norm(dim=-1, keepdim=True)  # ... and the first one across the half-space


def excess(w: torch.Tensor, x: torch.Tensor, pattern: str) -> torch.Tensor:
    """Per query t >= 1: ln(sum over other visible keys of e^{s_tj - s_t,target}) (<= ln(delta/(1-delta)) is met)."""
    n_tokens = x.shape[0]
    scores = x @ w @ x.T  # (query, key)
    rows = torch.arange(n_tokens)
    target = torch.zeros_like(rows) if pattern == "sink" else rows
    gap = scores - scores[rows, target][:, None]  # (query, key): s_tj - s_t,target
    hidden = (rows[None, :] > rows[:, None]) | (rows[None, :] == target[:, None])  # future keys, and the target
    return torch.logsumexp(gap.masked_fill(hidden, float("-inf")), dim=-1)[1:]


def target_weight(w: torch.Tensor, x: torch.Tensor, pattern: str) -> torch.Tensor:
    """Each query's softmax weight on its target: 1 / (1 + e^excess)."""
    return torch.sigmoid(-excess(w, x, pattern))


@dataclass(frozen=True)
class CostPoint:
    pattern: str
    geometry: str
    n_tokens: int
    norm: float  # ||W||_F of the smallest W found that meets the target; NaN when none was found
    worst: float  # the lowest target weight over the queries at that W (>= 1 - delta when met)


def smallest_norm(x: torch.Tensor, pattern: str, delta: float, steps: int = 400) -> tuple[float, float]:
    """(||W||_F, worst target weight) for the smallest W found by a penalty method, then scaled to just meet it."""
    bound = math.log(delta / (1 - delta))
    w = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([w], lr=0.1)
    for step in range(steps):
        weight = 10 ** (6 * step / steps)  # the penalty grows until the constraint wins
        loss = (w * w).sum() + weight * torch.relu(excess(w, x, pattern) - bound).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return _scaled_to_bound(w.detach(), x, pattern, bound)


def _scaled_to_bound(w: torch.Tensor, x: torch.Tensor, pattern: str, bound: float) -> tuple[float, float]:
    """Along W's direction, the smallest scale at which every query meets the bound (bisection), if any."""
    if w.norm() == 0 or excess(w * 1e6 / w.norm(), x, pattern).max() > bound:
        return float("nan"), float(target_weight(w, x, pattern).min())
    low, high = 0.0, 1.0
    while excess(w * high, x, pattern).max() > bound:
        high *= 2
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(w * middle, x, pattern).max() > bound else (low, middle)
    return float((w * high).norm()), float(target_weight(w * high, x, pattern).min())


def sweep(
    dim: int = 32, delta: float = 0.1, seed: int = 0, lengths: tuple[int, ...] = LENGTHS, steps: int = 400
) -> list[CostPoint]:
    """Every pattern, geometry and length: the smallest norm found."""
    ranges.check("dim", dim)
    ranges.check("seed", seed)
    points = []
    for geometry in GEOMETRIES:
        for n_tokens in lengths:
            x = embeddings(n_tokens, dim, geometry, seed)
            for pattern in PATTERNS:
                norm, worst = smallest_norm(x, pattern, delta, steps)
                points.append(CostPoint(pattern, geometry, n_tokens, norm, worst))
    return points


def slope(points: list[CostPoint]) -> float:
    """The exponent k of norm ~ T^k: a least-squares line through (log T, log norm) of the points met."""
    met = [(p.n_tokens, p.norm) for p in points if np.isfinite(p.norm)]
    if len(met) < 2:
        return float("nan")
    log_t, log_norm = np.log([t for t, _ in met]), np.log([n for _, n in met])
    return float(np.polyfit(log_t, log_norm, 1)[0])


def report(dim: int = 32, delta: float = 0.1, seed: int = 0, longest: int = LENGTHS[-1]) -> dict[str, object]:
    """The sweep up to T = ``longest`` as JSON-ready data: controls, slopes per "geometry/pattern", points
    (a norm or slope never found is None)."""
    points = sweep(dim=dim, delta=delta, seed=seed, lengths=tuple(n for n in LENGTHS if n <= longest))
    found = lambda value: value if np.isfinite(value) else None  # noqa: E731
    slopes = {
        f"{geometry}/{pattern}": found(slope([p for p in points if (p.geometry, p.pattern) == (geometry, pattern)]))
        for geometry in GEOMETRIES
        for pattern in PATTERNS
    }
    rows = [{**asdict(p), "norm": found(p.norm)} for p in points]
    return {"dim": dim, "delta": delta, "seed": seed, "slopes": slopes, "points": rows}


GEOMETRY_KEYS = {"aligned": "cost.aligned", "random": "cost.random"}


def cheaper(result: dict[str, object]) -> dict[str, str]:
    """Per geometry, the pattern whose norm grows more slowly with T: "sink", "diagonal", or "same" when the two
    slopes are within ``words.SAME_RATIO`` (or one was never found). The course and the scoreboard both read it."""
    found = {}
    for geometry in GEOMETRIES:
        sink, diagonal = (result["slopes"][f"{geometry}/{pattern}"] for pattern in PATTERNS)
        found[geometry] = (
            "same" if sink is None or diagonal is None else words.compare(diagonal, sink, "sink", "diagonal")
        )
    return found


def growth(result: dict[str, object], geometry: str, pattern: str) -> Message:
    """How one pattern's norm follows T, as its slope's word says it, with its first, largest and last norms."""
    slope = result["slopes"][f"{geometry}/{pattern}"]
    points = sorted((p["n_tokens"], p["norm"]) for p in result["points"]
                    if (p["geometry"], p["pattern"]) == (geometry, pattern) and p["norm"] is not None)  # fmt: skip
    (first, start), (last, end) = points[0], points[-1]
    peak, top = max(points, key=lambda point: point[1])
    word = words.growth_word(slope, min(norm for _, norm in points), top)
    return Message.of(GROWTH_KEYS[word], slope=round(slope, 2), first=first, start=round(start, 1),
                      last=last, end=round(end, 1), peak=peak, top=round(top, 1))  # fmt: skip


def explanation(result: dict[str, object]) -> list[Message]:
    """What a report says, one sentence per geometry, computed from its numbers: how each pattern's norm follows
    T, how far apart the two norms end, and the longest T at which a sink was found at all."""
    said = []
    for geometry, word in cheaper(result).items():
        norms = {(p["pattern"], p["n_tokens"]): p["norm"] for p in result["points"] if p["geometry"] == geometry}
        both = [n for (pattern, n), norm in norms.items() if pattern == "sink" and norm is not None
                and norms.get(("diagonal", n)) is not None]  # fmt: skip
        if any(result["slopes"][f"{geometry}/{pattern}"] is None for pattern in PATTERNS) or not both:
            said.append(Message.of("cost.says_unfound", geometry=Message.of(GEOMETRY_KEYS[geometry])))
            continue
        last = max(both)
        said.append(Message.of(SAYS_KEYS[word], geometry=Message.of(GEOMETRY_KEYS[geometry]),
                               sink=growth(result, geometry, "sink"), diagonal=growth(result, geometry, "diagonal"),
                               n=last, ratio=times(norms[("sink", last)] / norms[("diagonal", last)])))  # fmt: skip
        missing = sorted(n for (pattern, n), norm in norms.items() if pattern == "sink" and norm is None and n > last)
        if missing:
            said.append(Message.of("cost.says_missing", last=last, first=missing[0], dim=result["dim"]))
    return said
