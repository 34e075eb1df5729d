"""Training lab, part two: tiny transformers trained live, and where their heads park attention.

A head forms a sink where it has nothing to do (Guo et al. 2024): each task marks its active queries, and
every checkpoint measures, per head, the attention on BOS and the row's total weight at dormant and at
active queries. For sigmoid and linear attention the raw weights are reported, never a share of the row:
their rows need not sum to one (an untrained sigmoid head gives every key about 0.5).

Two variants build the sink into the architecture, as recent models do: ``sink-logit`` gives each head a
learned logit with no value (gpt-oss; the row's total weight is what the real keys keep), and ``gated`` closes
a sigmoid gate on each head's output (Qiu et al. 2025; the mean gate is recorded).
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
from sinkscope.core.names import TASK_VARIANTS
from sinkscope.lab.polarization import normalize
from sinkscope.lab.tasks import IGNORE, TASKS, Batch

ROW_SUMS_TO_ONE = ("softmax", "gated")  # softmax+1 and sink-logit rows may withhold mass; sigmoid, linear: raw
LEARNED = 0.9  # accuracy at active queries a run needs before its heads give a verdict
SINK = 0.9  # a head that puts at least this much of its attention on BOS at dormant queries is a sink
SILENT = 0.1  # ... and one that puts at most this much there (or weighs at most this much in all) is silent
SHARES = ("softmax", "softmax+1", "sink-logit", "gated")  # rows of shares of one unit: a BOS weight of 0.9 is a sink
Progress = Callable[[int, int], bool]  # (step, steps) -> keep going?
PROBE = 256  # sequences every checkpoint is measured on


@dataclass(frozen=True)
class Setup:
    """Model and optimizer of one task (the sizes measured in the claims issue)."""

    width: int
    layers: int
    heads: int
    mlp: bool
    lr: float
    batch: int
    weight_decay: float
    steps: int


SETUPS = {
    "backcopy": Setup(width=32, layers=1, heads=1, mlp=True, lr=1e-2, batch=32, weight_decay=0.01, steps=2000),
    "induction": Setup(width=128, layers=2, heads=4, mlp=True, lr=1e-3, batch=64, weight_decay=0.0, steps=2000),
}


class Attention(torch.nn.Module):
    def __init__(self, width: int, heads: int, variant: str) -> None:
        super().__init__()
        self.heads, self.variant = heads, variant
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.sink_logit = torch.nn.Parameter(torch.zeros(heads)) if variant == "sink-logit" else None  # starts as +1
        self.gate = torch.nn.Linear(width, width) if variant == "gated" else None  # elementwise, from the query

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Output (batch, pos, width), weights (batch, head, query, key), mean gate (batch, head, query)."""
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).unbind(2)  # each (batch, pos, head, d)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (batch, head, pos, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (batch, head, query, key)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        if self.sink_logit is not None:  # softmax over [scores, s_h]; the sink column has no value: drop it
            sink = self.sink_logit.view(1, -1, 1, 1).expand(batch, -1, length, 1)  # (batch, head, query, 1)
            blocked = scores.masked_fill(~causal, float("-inf"))
            weights = torch.softmax(torch.cat([blocked, sink], dim=-1), dim=-1)[..., :-1]
        elif self.variant in ("softmax", "softmax+1", "gated"):
            variant = "softmax" if self.variant == "gated" else self.variant  # a gate acts after the softmax
            weights = normalize(scores.masked_fill(~causal, float("-inf")), variant)
        else:
            weights = normalize(scores, self.variant) * causal
        heads_out = weights @ v  # (batch, head, pos, d)
        gate = torch.ones_like(heads_out)
        if self.gate is not None:  # Qiu et al.'s G1: a sigmoid gate on each head's output, computed from its query
            gate = torch.sigmoid(self.gate(x)).view(batch, length, self.heads, -1).transpose(1, 2)  # like heads_out
        mixed = (heads_out * gate).transpose(1, 2).reshape(batch, length, width)  # (batch, pos, width)
        return self.out(mixed), weights, gate.mean(-1)


class TinyTransformer(torch.nn.Module):
    """Pre-norm, learned positions, optional GELU MLPs: logits at every position and every attention map."""

    def __init__(self, variant: str, vocab: int, length: int, setup: Setup) -> None:
        super().__init__()
        width = setup.width
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Embedding(length, width)
        self.attention = torch.nn.ModuleList(Attention(width, setup.heads, variant) for _ in range(setup.layers))
        self.attention_norms = torch.nn.ModuleList(torch.nn.LayerNorm(width) for _ in range(setup.layers))
        self.mlp = torch.nn.ModuleList(_mlp(width) for _ in range(setup.layers)) if setup.mlp else None
        self.final_norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits (batch, pos, vocab), maps (layer, batch, head, query, key), gates (layer, batch, head, query)."""
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        maps, gates = [], []
        for i, attention in enumerate(self.attention):
            mixed, weights, gate = attention(self.attention_norms[i](x))
            x = x + mixed
            if self.mlp is not None:
                x = x + self.mlp[i](x)
            maps.append(weights)
            gates.append(gate)
        return self.head(self.final_norm(x)), torch.stack(maps), torch.stack(gates)


def _mlp(width: int) -> torch.nn.Module:
    """Pre-norm GELU MLP, four times wider inside."""
    layers = [torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(4 * width, width))


@dataclass
class TrainingRun:
    """A run's checkpoints. Per-head lists are step -> layer -> head; queries 1.. only (row 0 sees BOS alone)."""

    task: str
    variant: str
    seed: int
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)  # at active queries
    bos_dormant: list[list[list[float]]] = field(default_factory=list)  # weight on BOS at dormant queries
    bos_active: list[list[list[float]]] = field(default_factory=list)
    total_dormant: list[list[list[float]]] = field(default_factory=list)  # the row's total weight there
    total_active: list[list[list[float]]] = field(default_factory=list)
    gate_dormant: list[list[list[float]]] = field(default_factory=list)  # mean output gate there (1: no gate)
    gate_active: list[list[list[float]]] = field(default_factory=list)
    map_steps: list[int] = field(default_factory=list)  # the checkpoints whose maps are kept (about ten)
    maps: list[list] = field(default_factory=list)  # -> (layer, head, query, key) of one probe sequence
    example: list[int] = field(default_factory=list)
    example_active: list[bool] = field(default_factory=list)

    def final(self, name: str) -> np.ndarray:
        """The last checkpoint's (layer, head) values of ``bos_dormant``, ``total_active``, ..."""
        return np.array(getattr(self, name)[-1])

    def first_sink_step(self, threshold: float = SINK) -> int | None:
        """The first checkpoint at which some head puts >= ``threshold`` on BOS at dormant queries.

        None also for sigmoid and linear attention, whose raw weights are no share of the row.
        """
        if self.variant not in SHARES:
            return None
        return next((s for s, bos in zip(self.steps, self.bos_dormant, strict=True) if np.max(bos) >= threshold), None)

    def learned(self) -> bool:
        """Whether the task was learned: accuracy at active queries of at least ``LEARNED`` at the last checkpoint.
        A run that did not learn says nothing about where a working head parks."""
        return self.accuracy[-1] >= LEARNED

    def transient_sink(self, peak: float = 0.5, silent: float = SILENT) -> tuple[float, int, int] | None:
        """A sink that formed and went: (its largest BOS weight at dormant queries, the step of that peak, the first
        step after it where every head is back at or below ``silent``), when the peak reached ``peak`` and the run
        ends silent; otherwise None."""
        strongest = [float(np.max(bos)) for bos in self.bos_dormant]  # per checkpoint, over heads
        top = int(np.argmax(strongest))
        if self.variant not in SHARES or strongest[top] < peak or strongest[-1] > silent:
            return None
        released = next(s for s, value in zip(self.steps[top:], strongest[top:], strict=True) if value <= silent)
        return strongest[top], self.steps[top], released

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @staticmethod
    def load(path: Path) -> TrainingRun:
        return TrainingRun(**json.loads(path.read_text()))


def head_means(values: torch.Tensor, where: torch.Tensor) -> list[list[float]]:
    """Mean over the chosen (batch, query) cells of values (layer, batch, head, query): (layer, head)."""
    chosen = where[None, :, None, :].float()  # (1, batch, 1, query)
    total = (values * chosen).sum(dim=(1, 3))
    return (total / chosen.sum(dim=(1, 3)).clamp_min(1)).tolist()


def _checkpoint(run: TrainingRun, model: TinyTransformer, step: int, probe: Batch, keep_maps: bool) -> None:
    with torch.no_grad():
        logits, maps, gates = model(probe.inputs)  # maps: (layer, batch, head, query, key)
    scored = probe.targets != IGNORE
    run.steps.append(step)
    run.loss.append(float(F.cross_entropy(logits[scored], probe.targets[scored])))
    hits = logits.argmax(-1) == probe.targets
    run.accuracy.append(float(hits[probe.active].float().mean()) if probe.active.any() else float("nan"))
    queries = torch.ones_like(probe.active)
    queries[:, 0] = False
    dormant, active = queries & ~probe.active, queries & probe.active
    bos, total = maps[..., 0], maps.sum(-1)  # (layer, batch, head, query)
    run.bos_dormant.append(head_means(bos, dormant))
    run.bos_active.append(head_means(bos, active))
    run.total_dormant.append(head_means(total, dormant))
    run.total_active.append(head_means(total, active))
    run.gate_dormant.append(head_means(gates, dormant))
    run.gate_active.append(head_means(gates, active))
    if keep_maps:
        run.map_steps.append(step)
        run.maps.append(np.round(maps[:, 0].numpy(), 3).tolist())  # (layer, head, query, key) of one sequence


def train(
    task: str, variant: str, steps: int | None = None, seed: int = 0, lr: float | None = None, checkpoints: int = 40,
    progress: Progress | None = None,
) -> TrainingRun:  # fmt: skip
    """Train ``variant`` attention on ``task`` with its setup (``SETUPS``; ``lr`` overrides its rate)."""
    if task not in TASKS:
        raise InputError("error.unknown_task", task=task, choices=", ".join(TASKS))
    if variant not in TASK_VARIANTS:
        raise InputError("error.unknown_variant", variant=variant, choices=", ".join(TASK_VARIANTS))
    data, setup = TASKS[task], SETUPS[task]
    steps = steps or setup.steps
    for name, value in (("task_steps", steps), ("seed", seed), ("lr", lr or setup.lr)):
        ranges.check(name, value)
    torch.manual_seed(seed)
    model = TinyTransformer(variant, data.vocab, data.length, setup)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr or setup.lr, weight_decay=setup.weight_decay)
    generator = torch.Generator().manual_seed(seed)
    probe = data.batch(PROBE, torch.Generator().manual_seed(10_000 + seed))
    run = TrainingRun(task, variant, seed, example=probe.inputs[0].tolist(), example_active=probe.active[0].tolist())
    record = np.unique(np.linspace(0, steps, checkpoints + 1).astype(int)).tolist()
    with_maps = set(record[:: max(1, len(record) // 10)] + record[-1:])
    _checkpoint(run, model, 0, probe, keep_maps=True)
    for step in range(1, steps + 1):
        batch = data.batch(setup.batch, generator)
        logits = model(batch.inputs)[0]
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step in record:
            _checkpoint(run, model, step, probe, keep_maps=step in with_maps)
        if progress is not None and not progress(step, steps):
            break
    return run


@dataclass(frozen=True)
class Finding:
    """One claim checked on a set of runs: the number that decides it and whether it holds."""

    claim: str  # "sink", "withhold", "switch_off", "learned" or "gate"
    variant: str
    value: float
    holds: bool
    where: float | None = None  # for built-in sinks, where the dormant mass went: the learned logit's share, the gate
    source: tuple[int, int, int] = (0, 0, 0)  # (seed, layer, head) whose number ``value`` is


def _deciding(runs: list[TrainingRun], name: str, weakest_seed: bool, quietest_head: bool) -> tuple[float, tuple]:
    """The number that decides a claim and where it comes from: per run its strongest (or quietest) head's final
    ``name``, then the weakest (or strongest) run's. Returns (value, (seed, layer, head))."""
    picks = []
    for run in runs:
        final = run.final(name)  # (layer, head)
        layer, head = np.unravel_index(int(final.argmin() if quietest_head else final.argmax()), final.shape)
        picks.append((float(final[layer, head]), (run.seed, int(layer), int(head))))
    return (min if weakest_seed else max)(picks, key=lambda pick: pick[0])


def findings(runs: list[TrainingRun], sink: float = SINK, silent: float = SILENT) -> list[Finding]:
    """The lab's claims on these runs (every seed that learned its task must agree; the others give no verdict):

    - sink: some softmax head puts >= ``sink`` of its attention on BOS at dormant queries (the weakest seed's
      strongest head decides);
    - withhold: softmax+1 needs no sink, its BOS weight at dormant queries stays <= ``silent`` in every head;
    - switch_off: some sigmoid head's whole row weighs <= ``silent`` at dormant queries (it switches off; the
      quietest head of the loudest seed decides);
    - learned: every sink-logit head stays <= ``silent`` on BOS at dormant queries, and its logit takes at least
      half their mass in some head (the weakest seed's largest share is ``where``);
    - gate: every gated head stays <= ``silent`` on BOS at dormant queries (Qiu et al. 2025); ``where`` is the
      gate of the head that parks most on BOS, whether or not the claim holds.

    Each finding names the seed and head its number comes from (``source``).
    """
    by_variant: dict[str, list[TrainingRun]] = {}
    for run in runs:
        if run.learned():  # a run that did not learn its task gives no verdict
            by_variant.setdefault(run.variant, []).append(run)
    found = []
    if "softmax" in by_variant:
        value, source = _deciding(by_variant["softmax"], "bos_dormant", weakest_seed=True, quietest_head=False)
        found.append(Finding("sink", "softmax", value, value >= sink, source=source))
    if "softmax+1" in by_variant:
        value, source = _deciding(by_variant["softmax+1"], "bos_dormant", weakest_seed=False, quietest_head=False)
        found.append(Finding("withhold", "softmax+1", value, value <= silent, source=source))
    if "sigmoid" in by_variant:
        value, source = _deciding(by_variant["sigmoid"], "total_dormant", weakest_seed=False, quietest_head=True)
        found.append(Finding("switch_off", "sigmoid", value, value <= silent, source=source))
    if "sink-logit" in by_variant:
        value, source = _deciding(by_variant["sink-logit"], "bos_dormant", weakest_seed=False, quietest_head=False)
        taken = min(float((1 - run.final("total_dormant")).max()) for run in by_variant["sink-logit"])
        found.append(Finding("learned", "sink-logit", value, value <= silent and taken >= 0.5, taken, source))
    if "gated" in by_variant:
        value, source = _deciding(by_variant["gated"], "bos_dormant", weakest_seed=False, quietest_head=False)
        strongest = next(run for run in by_variant["gated"] if run.seed == source[0])
        gate = float(strongest.final("gate_dormant")[source[1], source[2]])
        found.append(Finding("gate", "gated", value, value <= silent, gate, source))
    return found
