"""Benchmark: the census on 1 and on 2 Ray workers, side by side, on this machine.

    python bench/bench_census.py [--docs 8] [--lengths 512] [--repeats 3]

Each repeat runs the same census (the built-in text cut into ``--docs`` documents, one window per length)
with 1 worker (holding every core) and with 2 (a core each), alternating, into fresh folders. It reports
medians of windows/s and tokens/s over the whole run (actor start and model load included) and in steady
state (first window to last), and the peak resident memory of each worker process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from sinkscope.census.runner import CensusProgress, CensusRequest, Cluster, run_census, start_ray  # noqa: E402
from sinkscope.core.bundled import DEFAULT_MODEL  # noqa: E402


class PeakMemory(threading.Thread):
    """Samples the resident memory of every census worker process until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks: dict[int, int] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.25):
            for process in psutil.process_iter(["cmdline", "memory_info"]):
                if "CensusWorker" in " ".join(process.info["cmdline"] or []) and process.info["memory_info"]:
                    rss = process.info["memory_info"].rss
                    self.peaks[process.pid] = max(self.peaks.get(process.pid, 0), rss)


def one_run(workers: int, args: argparse.Namespace) -> dict[str, float]:
    arrivals: list[float] = []

    def note(progress: CensusProgress) -> None:
        arrivals.extend([time.monotonic()] * (progress.windows - len(arrivals)))

    request = CensusRequest("builtin", [DEFAULT_MODEL], args.lengths, max_docs=args.docs)
    memory = PeakMemory()
    memory.start()
    with tempfile.TemporaryDirectory() as out:
        summary = run_census(request, out, Cluster(workers=workers), progress=note)
    memory.stopped.set()
    memory.join()
    steady = arrivals[-1] - arrivals[0]
    per_window = summary.tokens / summary.windows
    return {
        "windows/s": summary.windows / summary.seconds,
        "tokens/s": summary.tokens / summary.seconds,
        "steady windows/s": (summary.windows - 1) / steady,
        "steady tokens/s": (summary.windows - 1) * per_window / steady,
        "peak GB per worker": max(memory.peaks.values()) / 2**30,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[512])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    start_ray(Cluster())
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for workers in runs:
            runs[workers].append(one_run(workers, args))
    columns = list(runs[1][0])
    print(f"census of {args.docs} documents x lengths {args.lengths}, {args.repeats} repeats, medians")
    print(f"| {'':20s} | {'1 worker':>10s} | {'2 workers':>10s} | {'2 / 1':>6s} |")
    print(f"|{'-' * 22}|{'-' * 12}:|{'-' * 12}:|{'-' * 7}:|")
    for column in columns:
        one, two = (statistics.median(run[column] for run in runs[w]) for w in (1, 2))
        print(f"| {column:20s} | {one:10.2f} | {two:10.2f} | {two / one:6.2f} |")


if __name__ == "__main__":
    main()
