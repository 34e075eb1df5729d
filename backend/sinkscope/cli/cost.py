"""``sinkscope cost``: the smallest query-key norm that represents a sink or a diagonal, against T."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from sinkscope.cli.common import UsageError, finite, number
from sinkscope.names import COST_LENGTHS as LENGTHS


def run(args: argparse.Namespace) -> None:
    from sinkscope import cost

    if not 0 < args.delta < 1 or args.dim < 2 or args.max_length not in LENGTHS:
        raise UsageError(f"--delta must lie in (0, 1), --dim be at least 2, --max-length one of {LENGTHS}.")
    lengths = tuple(n for n in LENGTHS if n <= args.max_length)
    points = cost.sweep(dim=args.dim, delta=args.delta, seed=args.seed, lengths=lengths)
    slopes = {}
    for geometry in cost.GEOMETRIES:
        for pattern in cost.PATTERNS:
            chosen = [p for p in points if p.geometry == geometry and p.pattern == pattern]
            slopes[f"{geometry}/{pattern}"] = cost.slope(chosen)
            norms = "  ".join(f"{p.n_tokens}:{p.norm:.1f}" for p in chosen)
            print(f"{geometry:8s} {pattern:9s} slope {slopes[f'{geometry}/{pattern}']:6.2f}   ||W|| at T = {norms}")
    if args.json:
        report = {"dim": args.dim, "delta": args.delta, "seed": args.seed, "slopes": slopes}
        report["points"] = [{k: finite(v) for k, v in asdict(p).items()} for p in points]
        Path(args.json).write_text(json.dumps(report, indent=1))


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("cost", help="how the norm needed for a sink or a diagonal grows with T")
    command.add_argument("--dim", type=number(int, 2), default=32, help="embedding dimensions d")
    command.add_argument(
        "--delta",
        type=number(float, 0, 1, strict=True),
        default=0.1,
        help="each query puts at least 1 - delta on its target",
    )
    command.add_argument("--seed", type=number(int, 0), default=0)
    command.add_argument(
        "--max-length", type=int, choices=LENGTHS, default=1024, help="the longest T (8, 16, ... 1024)"
    )
    command.add_argument("--json", help="write the points and slopes here")
    command.set_defaults(run=run)
