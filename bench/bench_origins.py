"""Benchmark: what the origins page adds, on the bundled model and an example text (default: the English one).

    python bench/bench_origins.py [--example english] [--repeats 5] [--tree PATH]

Rows: the analysis (the explorer's first head map) with key_sink and the writes, plus the secondary sinks and the
named keys; the QK attribution of the strongest sink head; one write removed at the first token (the changed run
alone, as the page runs it beside the cached intact run, and both). ``--tree`` times the analysis of another
checkout (the tree before the change) in a process of its own, alternately with this tree's, for a before/after
row. Medians of ``--repeats``, wall seconds on one process's threads: run it on an unloaded machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ANALYSIS = """
import json, statistics, sys, time
from sinkscope.core.capture import analyze
from sinkscope.core.models import load_model
loaded = load_model("smollm2-135m")
text = json.loads(sys.argv[1])
analyze(loaded, text)  # warm
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    analyze(loaded, text)
    times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def analysis_in(tree: Path, text: str, repeats: int) -> float:
    """The median analysis time of ``tree``'s library, in a fresh process."""
    env = {"PYTHONPATH": str(tree / "backend"), "PATH": "/usr/bin"}  # that tree's library, not the installed one
    command = [sys.executable, "-c", ANALYSIS, json.dumps(text), str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="english")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tree", type=Path, help="another checkout whose analysis to time alternately")
    args = parser.parse_args()

    import numpy as np
    from sinkscope.core.capture import analyze
    from sinkscope.core.models import load_model
    from sinkscope.experiments import qk, writes
    from sinkscope.findings import origins

    examples = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))
    text = next(e["text"] for e in examples if e["id"] == args.example)
    loaded = load_model("smollm2-135m")
    trace = analyze(loaded, text)
    sink = np.nan_to_num(trace.heads["sink"], nan=-1.0)
    layer, head = (int(i) for i in np.unravel_index(np.argmax(sink), sink.shape))
    part, block = writes.first_writes(trace).builder
    removed = writes.RemoveWrite(block, part)
    ids = trace.token_ids

    def page_start() -> None:
        found = analyze(loaded, text)
        origins.secondary_sinks(found)
        origins.receivers(found, 3)

    rows = [
        ("analysis (the explorer's first head map, key_sink and writes included)", lambda: analyze(loaded, text)),
        ("analysis + secondary sinks + named keys", page_start),
        (f"QK attribution, layer {layer} head {head}", lambda: qk.qk_attribution(loaded, ids, layer, head)),
        (f"{part} write of block {block} removed: the changed run", lambda: writes.outcome(loaded, ids, removed)),
        ("the same with the intact run (remove_write)", lambda: writes.remove_write(loaded, ids, block, part)),
    ]
    print(f"{args.example} example, {trace.n_tokens} tokens, median of {args.repeats}")
    print("| what | seconds |\n|---|---:|")
    for name, run in rows:
        print(f"| {name} | {median_seconds(run, args.repeats):.3f} |")
    if args.tree is not None:
        ours, theirs = [], []
        for _ in range(3):  # alternately, so both trees meet the same noise
            ours.append(analysis_in(ROOT, text, args.repeats))
            theirs.append(analysis_in(args.tree, text, args.repeats))
        print(f"| analysis, fresh processes alternately: this tree / {args.tree} | "
              f"{statistics.median(ours):.3f} / {statistics.median(theirs):.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
