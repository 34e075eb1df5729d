"""Training lab, part one: softmax polarizes under gradient descent (tiny transformers: ``sinkscope.lab.toy``).

After Varre, Rofin & Flammarion (2026), "Gradient Flow Polarizes Softmax Outputs towards
Low-Entropy Solutions": the value-softmax block beta = V sigma(a) trained on a logistic or square loss.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sinkscope.core import ranges
from sinkscope.core.errors import InputError
from sinkscope.core.names import POLARIZE_VARIANTS

Progress = Callable[[int, int], bool]  # (step, steps) -> keep going?


def normalize(scores: torch.Tensor, variant: str) -> torch.Tensor:
    """Turn scores (..., keys) into weights; only softmax rows must sum to one (metrics.md)."""
    if variant == "softmax":
        return torch.softmax(scores, dim=-1)
    if variant == "softmax+1":  # e^x / (1 + sum e^x): a silent extra key with logit 0 and value 0
        zero = torch.zeros_like(scores[..., :1])
        return torch.softmax(torch.cat([zero, scores], dim=-1), dim=-1)[..., 1:]
    if variant == "sigmoid":
        return torch.sigmoid(scores)
    if variant == "relu":
        return torch.relu(scores)
    if variant == "linear":
        return scores
    raise InputError("error.unknown_variant", variant=variant, choices=", ".join(POLARIZE_VARIANTS))


def entropy_of(weights: np.ndarray) -> float:
    """Normalized entropy of |w| / sum |w| (0 = one-hot, 1 = uniform)."""
    p = np.abs(weights) / max(float(np.abs(weights).sum()), 1e-30)
    nonzero = p[p > 0]
    return float(-(nonzero * np.log(nonzero)).sum() / math.log(len(p)))


@dataclass
class PolarizeRun:
    variant: str
    loss: str
    settings: dict[str, float] = field(default_factory=dict)  # candidates, dim, steps, lr, seed
    steps: list[int] = field(default_factory=list)
    weights: list[list[float]] = field(default_factory=list)  # sigma(a) at each recorded step
    entropy: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)  # largest non-maximal |weight| / maximal
    singular_values: list[list[float]] = field(default_factory=list)  # of V
    train_loss: list[float] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @staticmethod
    def load(path: Path) -> PolarizeRun:
        return PolarizeRun(**json.loads(path.read_text()))

    def polarized(self) -> bool:
        """Whether the weights ended near one-hot: entropy below half its start (the scoreboard's test)."""
        return self.entropy[-1] < self.entropy[0] / 2

    def dead(self) -> int:
        """Candidates whose final weight is exactly 0: a ReLU score below 0 gets no gradient and never comes back."""
        return sum(weight == 0 for weight in self.weights[-1])


def polarize(
    variant: str = "softmax", loss: str = "logistic", candidates: int = 8, dim: int = 16, samples: int = 256,
    steps: int = 3000, lr: float = 0.5, seed: int = 0, progress: Progress | None = None,
) -> PolarizeRun:  # fmt: skip
    """Gradient descent on beta = V sigma(a) from a near-uniform start; records on a log-spaced step grid."""
    for name, value in (("polarize_steps", steps), ("dim", dim), ("candidates", candidates), ("samples", samples),
                        ("lr", lr), ("seed", seed)):  # fmt: skip
        ranges.check(name, value)
    if loss not in ("logistic", "square"):
        raise InputError("error.unknown_loss", loss=loss)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, dim, generator=generator)  # (sample, dim)
    truth = torch.randn(dim, generator=generator)
    y = torch.sign(x @ truth) if loss == "logistic" else x @ truth
    scores = (1e-3 * torch.randn(candidates, generator=generator)).requires_grad_()
    values = (0.1 * torch.randn(dim, candidates, generator=generator)).requires_grad_()
    record = set(np.unique(np.geomspace(1, steps, 60).astype(int)).tolist())
    run = PolarizeRun(variant, loss, dict(candidates=candidates, dim=dim, steps=steps, lr=lr, seed=seed))
    for step in range(1, steps + 1):
        weights = normalize(scores, variant)
        margin = x @ (values @ weights)  # (sample,)
        objective = F.softplus(-y * margin).mean() if loss == "logistic" else 0.5 * ((margin - y) ** 2).mean()
        grad_scores, grad_values = torch.autograd.grad(objective, [scores, values])
        with torch.no_grad():
            scores -= lr * grad_scores
            values -= lr * grad_values
        if step in record:
            _record(run, step, weights.detach().numpy(), values.detach().numpy(), objective.item())
        if progress is not None and not progress(step, steps):
            break
    return run


def _record(run: PolarizeRun, step: int, weights: np.ndarray, values: np.ndarray, objective: float) -> None:
    magnitude = np.sort(np.abs(weights))[::-1]
    run.steps.append(step)
    run.weights.append(weights.tolist())
    run.entropy.append(entropy_of(weights))
    run.ratio.append(float(magnitude[1] / magnitude[0]) if magnitude[0] > 0 else float("nan"))
    run.singular_values.append(np.linalg.svd(values, compute_uv=False).tolist())
    run.train_loss.append(objective)
