"""Benchmark: one quantized-cache run (KIVI's causal cache, and the old non-causal bound) against a dense pass of the
same text, on the bundled model (issue 41's budget: within 2x), alternately in one process, medians of
``--repeats``; then the per-head map of every head restricted to sinks + window (budget: 30 s) and DuoAttention's
policy curve, ``--map-repeats`` times each.

    python bench/bench_kv.py [--tokens 512] [--repeats 5] [--budget 64] [--map-repeats 1]

The text is Python's built-in help (it ships with every Python); wall seconds: run it on an unloaded machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=int, default=64, help="the cache the per-head map restricts a head to")
    parser.add_argument("--map-repeats", type=int, default=1, help="the map takes minutes on two cores")
    args = parser.parse_args()

    from sinkscope.core.capture import analyze_ids
    from sinkscope.core.models import load_model
    from sinkscope.core.texts import builtin_text
    from sinkscope.experiments import kv_heads, kv_quant
    from sinkscope.experiments.streaming import dense

    loaded = load_model("smollm2-135m")
    ids = loaded.encode(builtin_text(), args.tokens, truncate=True)
    trace = analyze_ids(loaded, ids)
    kept = kv_quant.protected("sinks", len(ids), kv_quant.detected_sinks(trace))
    runs = {"dense pass (SDPA)": lambda: dense(loaded, ids),
            "2-bit causal cache (R = 32), sinks kept": lambda: kv_quant.quantized_nll(loaded, ids, 2, kept),
            "2-bit non-causal bound, sinks kept": lambda: kv_quant.quantized_nll(loaded, ids, 2, kept,
                                                                                  residual=None)}  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm
    for _ in range(args.repeats):
        for name, run in runs.items():  # alternately: both meet the same noise
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    mapped, curved = "per-head map (every head, one lane each)", "DuoAttention policy curve (12 passes)"
    times[mapped], times[curved] = [], []
    for _ in range(args.map_repeats):
        start = time.perf_counter()
        needs = kv_heads.head_needs(loaded, ids, args.budget)
        times[mapped].append(time.perf_counter() - start)
        start = time.perf_counter()
        kv_heads.policy_curve(loaded, ids, needs)
        times[curved].append(time.perf_counter() - start)
    medians = {name: statistics.median(found) for name, found in times.items()}
    base = medians["dense pass (SDPA)"]
    print(f"{len(ids)} tokens, medians of {args.repeats} ({args.map_repeats} for the map and the curve)\n"
          "| run | seconds | against dense |\n|---|---:|---:|")  # fmt: skip
    for name, seconds in medians.items():
        print(f"| {name} | {seconds:.3f} | {seconds / base:.2f}x |")


if __name__ == "__main__":
    main()
