"""``sinkscope lab``: the training experiments (softmax polarizes; sinks emerge in a tiny transformer)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sinkscope.names import LAB_VARIANTS


def _polarize_report(args: argparse.Namespace) -> dict[str, object]:
    from sinkscope import lab

    run = lab.polarize(args.attention, args.loss, steps=args.steps, seed=args.seed, lr=args.lr or 0.5)
    print(f"{args.attention}, {args.loss} loss: entropy {run.entropy[0]:.3f} -> {run.entropy[-1]:.3f}")
    return {
        "attention": args.attention,
        "loss": args.loss,
        "steps": run.steps[-1],
        "final_entropy": run.entropy[-1],
        "final_largest_weight": float(np.max(np.abs(run.weights[-1]))),
        "ratio_curve": [{"step": step, "ratio": ratio} for step, ratio in zip(run.steps, run.ratio, strict=True)],
    }


def _induction_report(args: argparse.Namespace) -> dict[str, object]:
    from sinkscope import lab

    run = lab.train_induction(args.attention, steps=args.steps, seed=args.seed, lr=args.lr or 1e-3)
    print(
        f"{args.attention}: loss {run.loss[-1]:.3f}, accuracy {run.accuracy[-1]:.3f}, sink rate {run.sink_rate():.1f}%"
    )
    if args.save:
        Path(args.save).mkdir(parents=True, exist_ok=True)
        run.save(Path(args.save) / f"{args.attention}.json")
    final = np.array(run.bos_attention[-1])  # (layer, head)
    heads = [
        {"layer": layer, "head": head, "value": float(final[layer, head])} for layer, head in np.ndindex(final.shape)
    ]
    return {
        "attention": args.attention,
        "steps": run.steps[-1],
        "final_loss": run.loss[-1],
        "final_accuracy": run.accuracy[-1],
        "sink_rate_eps_0.3": run.sink_rate(0.3),
        "bos_attention": heads,
    }


def run(args: argparse.Namespace) -> None:
    report = _polarize_report(args) if args.experiment == "polarize" else _induction_report(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("lab", help="training experiments: softmax polarization, sinks emerging")
    command.add_argument("experiment", choices=["polarize", "induction"])
    command.add_argument("--attention", default="softmax", help=", ".join(LAB_VARIANTS))
    command.add_argument("--loss", default="logistic", choices=["logistic", "square"], help="polarize only")
    command.add_argument("--steps", type=int, default=3000)
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--lr", type=float, help="default 0.5 (polarize) or 1e-3 (induction)")
    command.add_argument("--json", help="write the final numbers here")
    command.add_argument("--save", help="induction: write the whole run to DIR/<attention>.json for the page")
    command.set_defaults(run=run)
