"""Benchmark: the bundled model's weights as loaded from disk against laid out for decoding (models.py).

    python bench/bench_decoding.py [--repeats 7]

One-token steps of 1, 2 and 5 lanes (what streaming and generation run) and one forward over 512 tokens (what
an analysis runs), both layouts in one process, interleaved; medians in milliseconds and their ratio.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from sinkscope.core.bundled import DEFAULT_MODEL  # noqa: E402
from sinkscope.core.models import load_model  # noqa: E402

SHAPES = {"step, 1 lane": (1, 1), "step, 2 lanes": (2, 1), "step, 5 lanes": (5, 1), "forward, 512 tokens": (1, 512)}


def as_on_disk(model: torch.nn.Module) -> torch.nn.Module:
    """A copy with every Linear weight (out, in)-contiguous again, ties kept."""
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = module.weight.data.contiguous()
    return twin


def milliseconds(model: torch.nn.Module, shape: tuple[int, int]) -> float:
    ids = torch.zeros(shape, dtype=torch.long)
    calls = 10 if shape[1] == 1 else 1
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(calls):
            model(input_ids=ids, use_cache=False)
    return (time.perf_counter() - start) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    laid_out = load_model(DEFAULT_MODEL).model
    models = {"on disk": as_on_disk(laid_out), "for decoding": laid_out}
    found: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats + 1):  # the first round warms both up and is not counted
        for name, model in models.items():
            for shape_name, shape in SHAPES.items():
                found.setdefault((name, shape_name), []).append(milliseconds(model, shape))
    print(f"torch threads: {torch.get_num_threads()}, medians of {args.repeats}")
    print("| call | on disk (ms) | for decoding (ms) | decoding / disk |\n|---|---:|---:|---:|")
    for shape_name in SHAPES:
        disk, decoding = (statistics.median(found[name, shape_name][1:]) for name in models)
        print(f"| {shape_name} | {disk:.1f} | {decoding:.1f} | {decoding / disk:.2f} |")


if __name__ == "__main__":
    main()
