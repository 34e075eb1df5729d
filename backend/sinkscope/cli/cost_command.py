"""``sinkscope cost``: the smallest query-key norm that represents a sink or a diagonal, against T."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sinkscope.cli.arguments import number, ranged
from sinkscope.core.names import COST_LENGTHS as LENGTHS


def run(args: argparse.Namespace) -> None:
    from sinkscope.experiments import cost

    report = cost.report(dim=args.dim, delta=args.delta, seed=args.seed, longest=args.max_length)
    for name, slope in report["slopes"].items():
        geometry, pattern = name.split("/")
        norms = "  ".join(
            f"{p['n_tokens']}:{p['norm']:.1f}" if p["norm"] is not None else f"{p['n_tokens']}:none"
            for p in report["points"]
            if (p["geometry"], p["pattern"]) == (geometry, pattern)
        )
        shown = f"{slope:6.2f}" if slope is not None else "  none"
        print(f"{geometry:8s} {pattern:9s} slope {shown}   ||W|| at T = {norms}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("cost", help="how the norm needed for a sink or a diagonal grows with T")
    command.add_argument("--dim", type=ranged("dim"), default=32, help="embedding dimensions d")
    command.add_argument(
        "--delta",
        type=number(float, 0, 1, strict=True),
        default=0.1,
        help="each query puts at least 1 - delta on its target",
    )
    command.add_argument("--seed", type=ranged("seed"), default=0)
    command.add_argument(
        "--max-length", type=int, choices=LENGTHS, default=1024, help="the longest T (8, 16, ... 1024)"
    )
    command.add_argument("--json", help="write the points and slopes here")
    command.set_defaults(run=run)
