"""Training lab: softmax polarizes under gradient descent, and sinks emerge in a tiny transformer.

After Varre, Rofin & Flammarion (2026), "Gradient Flow Polarizes Softmax Outputs towards
Low-Entropy Solutions": (1) the value-softmax block beta = V sigma(a) trained on a logistic or
square loss; (2) a 2-layer, 4-head transformer trained on their synthetic induction task.
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

from sinkscope.errors import InputError
from sinkscope.names import LAB_VARIANTS

VARIANTS = LAB_VARIANTS
TRANSFORMER_VARIANTS = ("softmax", "softmax+1", "sigmoid", "linear")
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
    raise InputError("error.unknown_variant", variant=variant, choices=", ".join(VARIANTS))


def entropy_of(weights: np.ndarray) -> float:
    """Normalized entropy of |w| / sum |w| (0 = one-hot, 1 = uniform)."""
    p = np.abs(weights) / max(float(np.abs(weights).sum()), 1e-30)
    nonzero = p[p > 0]
    return float(-(nonzero * np.log(nonzero)).sum() / math.log(len(p)))


@dataclass
class PolarizeRun:
    variant: str
    loss: str
    steps: list[int] = field(default_factory=list)
    weights: list[list[float]] = field(default_factory=list)  # sigma(a) at each recorded step
    entropy: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)  # largest non-maximal |weight| / maximal
    singular_values: list[list[float]] = field(default_factory=list)  # of V
    train_loss: list[float] = field(default_factory=list)


def polarize(
    variant: str = "softmax", loss: str = "logistic", candidates: int = 8, dim: int = 16, samples: int = 256,
    steps: int = 3000, lr: float = 0.5, seed: int = 0, progress: Progress | None = None,
) -> PolarizeRun:  # fmt: skip
    """Gradient descent on beta = V sigma(a) from a near-uniform start; records on a log-spaced step grid."""
    if loss not in ("logistic", "square"):
        raise InputError("error.unknown_loss", loss=loss)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, dim, generator=generator)  # (sample, dim)
    truth = torch.randn(dim, generator=generator)
    y = torch.sign(x @ truth) if loss == "logistic" else x @ truth
    scores = (1e-3 * torch.randn(candidates, generator=generator)).requires_grad_()
    values = (0.1 * torch.randn(dim, candidates, generator=generator)).requires_grad_()
    record = set(np.unique(np.geomspace(1, steps, 60).astype(int)).tolist())
    run = PolarizeRun(variant, loss)
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


# --- The induction task and a tiny transformer -------------------------------------------------

BOS = 0
VOCAB = 50
LENGTH = 13  # BOS, 10 distinct tokens, one repeated token, and its continuation as the target
DISTINCT = LENGTH - 3


def induction_batch(batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs (batch, 12), targets (batch,)): the last input repeats an earlier token; the target is
    the token that followed it, so the answer is determined by the sequence (copy what came next)."""
    distinct = torch.stack([torch.randperm(VOCAB - 1, generator=generator)[:DISTINCT] + 1 for _ in range(batch)])
    pick = torch.randint(0, DISTINCT - 1, (batch,), generator=generator)  # not the last: it has a successor
    rows = torch.arange(batch)
    repeated, target = distinct[rows, pick], distinct[rows, pick + 1]
    inputs = torch.cat([torch.full((batch, 1), BOS), distinct, repeated[:, None]], dim=1)
    return inputs, target


class Attention(torch.nn.Module):
    def __init__(self, width: int, heads: int, variant: str) -> None:
        super().__init__()
        self.heads, self.variant = heads, variant
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).unbind(2)  # each (batch, pos, head, d)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (batch, head, pos, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (batch, head, query, key)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        if self.variant in ("softmax", "softmax+1"):
            weights = normalize(scores.masked_fill(~causal, float("-inf")), self.variant)
        else:
            weights = normalize(scores, self.variant) * causal
        mixed = (weights @ v).transpose(1, 2).reshape(batch, length, width)  # (batch, pos, width)
        return self.out(mixed), weights


class TinyTransformer(torch.nn.Module):
    """Pre-norm, learned positions, 2 layers x 4 heads, width 128 (the paper's synthetic setting)."""

    def __init__(self, variant: str, width: int = 128, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.position = torch.nn.Embedding(LENGTH, width)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(width) for _ in range(2 * layers + 1))
        self.attention = torch.nn.ModuleList(Attention(width, heads, variant) for _ in range(layers))
        self.mlp = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
            for _ in range(layers)
        )
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits at the last position (batch, vocab) and every attention map (layer, batch, head, q, k)."""
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        maps = []
        for i, (attention, mlp) in enumerate(zip(self.attention, self.mlp, strict=True)):
            mixed, weights = attention(self.norms[2 * i](x))
            x = x + mixed
            x = x + mlp(self.norms[2 * i + 1](x))
            maps.append(weights)
        return self.head(self.norms[-1](x[:, -1])), torch.stack(maps)


@dataclass
class InductionRun:
    variant: str
    seed: int
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    bos_attention: list[list[list[float]]] = field(default_factory=list)  # step -> layer -> head
    maps: list[list] = field(default_factory=list)  # step -> (layer, head, query, key) of one sequence
    example: list[int] = field(default_factory=list)

    def sink_rate(self, eps: float = 0.3) -> float:
        final = np.array(self.bos_attention[-1])
        return float(100 * (final > eps).mean())

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @staticmethod
    def load(path: Path) -> InductionRun:
        return InductionRun(**json.loads(path.read_text()))


def bos_attention(maps: torch.Tensor) -> np.ndarray:
    """Mean attention each head pays to BOS, over queries 1.. and the batch: (layer, head)."""
    return maps[..., 1:, 0].mean(dim=(1, 3)).detach().numpy()


def train_induction(
    variant: str = "softmax", steps: int = 2000, seed: int = 0, batch: int = 64, lr: float = 1e-3,
    checkpoints: int = 20, progress: Progress | None = None,
) -> InductionRun:  # fmt: skip
    """Adam on the induction task; every steps/checkpoints, record loss, accuracy and attention."""
    if variant not in TRANSFORMER_VARIANTS:
        raise InputError("error.unknown_variant", variant=variant, choices=", ".join(TRANSFORMER_VARIANTS))
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = TinyTransformer(variant)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    probe, probe_targets = induction_batch(256, torch.Generator().manual_seed(10_000 + seed))
    run = InductionRun(variant, seed, example=probe[0].tolist())
    every = max(1, steps // checkpoints)
    for step in range(1, steps + 1):
        inputs, targets = induction_batch(batch, generator)
        loss = F.cross_entropy(model(inputs)[0], targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % every == 0 or step == steps:
            _checkpoint(run, model, step, probe, probe_targets)
        if progress is not None and not progress(step, steps):
            break
    return run


def _checkpoint(
    run: InductionRun, model: TinyTransformer, step: int, probe: torch.Tensor, targets: torch.Tensor
) -> None:
    with torch.no_grad():
        logits, maps = model(probe)
    run.steps.append(step)
    run.loss.append(float(F.cross_entropy(logits, targets)))
    run.accuracy.append(float((logits.argmax(-1) == targets).float().mean()))
    run.bos_attention.append(bos_attention(maps).tolist())
    run.maps.append(np.round(maps[:, 0].numpy(), 4).tolist())  # (layer, head, query, key) of one sequence
