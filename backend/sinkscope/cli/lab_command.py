"""``sinkscope lab``: the training experiments (softmax polarizes; sinks form where heads are dormant)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sinkscope.cli.arguments import ranged
from sinkscope.core.names import LAB_TASKS as TASKS
from sinkscope.core.names import POLARIZE_VARIANTS, TASK_VARIANTS

if TYPE_CHECKING:  # imported where used: `sinkscope --help` starts without torch
    from sinkscope import lab
    from sinkscope.lab import toy


def _save(run: lab.PolarizeRun | toy.TrainingRun, folder: str | None, name: str) -> None:
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        run.save(Path(folder) / name)


def _polarize_report(args: argparse.Namespace) -> dict[str, object]:
    from sinkscope import lab

    run = lab.polarize(args.attention, args.loss, steps=args.steps or 3000, seed=args.seed, lr=args.lr or 0.5)
    print(f"{args.attention}, {args.loss} loss: entropy {run.entropy[0]:.3f} -> {run.entropy[-1]:.3f}")
    _save(run, args.save, f"{args.attention}-{args.loss}-seed{args.seed}.json")
    return {
        "attention": args.attention,
        "loss": args.loss,
        "steps": run.steps[-1],
        "final_entropy": run.entropy[-1],
        "final_largest_weight": float(np.max(np.abs(run.weights[-1]))),
        "ratio_curve": [{"step": step, "ratio": ratio} for step, ratio in zip(run.steps, run.ratio, strict=True)],
    }


def _built_in_sink(run: toy.TrainingRun) -> str:
    """Where a built-in sink put the dormant queries' mass: the learned logit's share, or the gate left open."""
    if run.variant == "sink-logit":
        taken = 1 - run.final("total_dormant").min()
        return f"\n  the learned sink logit takes {taken:.3f} of the dormant queries' mass"
    if run.variant == "gated":
        return f"\n  the output gate at dormant queries: {run.final('gate_dormant').min():.3f} (1 = open)"
    return ""


def _training_report(args: argparse.Namespace) -> dict[str, object]:
    from sinkscope.lab import toy

    run = toy.train(args.experiment, args.attention, steps=args.steps, seed=args.seed, lr=args.lr)
    first = run.first_sink_step()
    print(
        f"{args.experiment}, {args.attention}, seed {args.seed}: loss {run.loss[-1]:.3f}, "
        f"accuracy at active queries {run.accuracy[-1]:.3f}\n"
        f"  largest BOS weight at dormant queries {run.final('bos_dormant').max():.3f}, "
        f"at active queries {run.final('bos_active').max():.3f}; "
        f"first head >= 0.9 at dormant queries: {'step ' + str(first) if first is not None else 'none'}"
        + ("" if args.attention in toy.SHARES else " (raw weights: rows need not sum to 1)")
        + _built_in_sink(run)
    )
    _save(run, args.save, f"{args.attention}-seed{args.seed}.json")
    names = ("bos_dormant", "bos_active", "total_dormant", "total_active", "gate_dormant", "gate_active")
    finals = {name: run.final(name) for name in names}  # each (layer, head)
    heads = [
        {"layer": layer, "head": head, **{name: float(finals[name][layer, head]) for name in names}}
        for layer, head in np.ndindex(finals["bos_dormant"].shape)
    ]
    return {
        "task": args.experiment, "attention": args.attention, "seed": args.seed, "steps": run.steps[-1],
        "final_loss": run.loss[-1], "final_accuracy": run.accuracy[-1], "first_sink_step": first, "heads": heads,
    }  # fmt: skip


def run(args: argparse.Namespace) -> None:
    report = _polarize_report(args) if args.experiment == "polarize" else _training_report(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("lab", help="training experiments: softmax polarization, sinks emerging")
    command.add_argument("experiment", choices=["polarize", *TASKS], help="polarize, or a task to train on")
    variants = f"polarize: {', '.join(POLARIZE_VARIANTS)}; a task: {', '.join(TASK_VARIANTS)}"
    command.add_argument("--attention", default="softmax", help=variants)
    command.add_argument("--loss", default="logistic", choices=["logistic", "square"], help="polarize only")
    command.add_argument(
        "--steps", type=ranged("polarize_steps"), help="default 3000 (polarize) or the task's (2000; at most 50,000)"
    )
    command.add_argument("--seed", type=ranged("seed"), default=0)
    command.add_argument("--lr", type=ranged("lr", float), help="default 0.5 (polarize) or the task's setup")
    command.add_argument("--json", help="write the final numbers here")
    command.add_argument(
        "--save",
        metavar="DIR",
        help="write the run to DIR/<attention>-seed<seed>.json (polarize: <attention>-<loss>-seed<seed>.json)",
    )
    command.set_defaults(run=run)
