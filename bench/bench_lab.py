"""Live training times of the lab's tasks on one CPU thread (the page's Retrain button), and the cost sweep.

    .venv/bin/python bench/bench_lab.py [--repeats 3]

Each row trains one variant for the task's default steps; the median wall time of the repeats, interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from sinkscope.experiments import cost
from sinkscope.lab import toy

TARGETS = {"backcopy": 30.0, "induction": 90.0}  # seconds, from the claims issue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {task: [] for task in TARGETS}
    for repeat in range(repeats):
        for task in TARGETS:
            start = time.perf_counter()
            toy.train(task, "softmax", seed=repeat)
            times[task].append(time.perf_counter() - start)
    start = time.perf_counter()
    cost.sweep(lengths=tuple(n for n in cost.LENGTHS if n <= 256))
    sweep = time.perf_counter() - start
    print(f"| run (one thread) | median of {repeats} (s) | target (s) |\n|---|---:|---:|")
    for task, found in times.items():
        steps = toy.SETUPS[task].steps
        print(f"| {task}, softmax, {steps} steps | {statistics.median(found):.1f} | {TARGETS[task]:.0f} |")
    print(f"| cost sweep, T = 8 ... 256 (the page's live default) | {sweep:.1f} | — |")


if __name__ == "__main__":
    main()
