"""Benchmark: what each why-sinks page runs, against a plain SDPA forward with logits, on the bundled model.

Every operation is timed in the same process, in turns, so shared-machine noise hits all of them alike;
the table gives medians and the ratio to the plain forward of the same tokens.

    python bench/bench_lessons.py [--tokens 512,2048] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from sinkscope.core.bundled import DEFAULT_MODEL  # noqa: E402
from sinkscope.core.capture import analyze_ids, attention_maps  # noqa: E402
from sinkscope.core.models import load_model  # noqa: E402
from sinkscope.experiments import interventions as iv  # noqa: E402
from sinkscope.experiments.geometry import key_geometry  # noqa: E402

from bench.bench_analyze import sdpa_model, token_ids  # noqa: E402


def operations(loaded: object, plain: torch.nn.Module, ids: list[int]) -> dict[str, Callable[[], object]]:
    trace = analyze_ids(loaded, ids)
    layers = tuple(range(2, loaded.info.n_layers))
    sinks = iv.heads_of_kind(trace.heads["kind"], "sink", layers)
    mean = iv.set_massive(loaded, trace.massive, "mean", 1)
    input_ids = torch.tensor([ids])  # (batch=1, token)
    return {
        "plain forward (SDPA, logits)": lambda: plain(input_ids),
        "intact run (page comparisons)": lambda: iv.outcome(loaded, ids),
        "drop first key, layers 2-29": lambda: iv.outcome(loaded, ids, iv.DropFirst(1, layers)),
        f"force {len(sinks)} sink heads to diagonal": lambda: iv.outcome(loaded, ids, iv.ForceHeads(sinks, "diagonal")),
        "massive set to mean (run)": lambda: iv.outcome(loaded, ids, mean),
        "massive means over 6 texts": lambda: iv.set_massive(loaded, trace.massive, "mean", 1),
        "sensitivity (3 runs)": lambda: iv.sensitivity(loaded, ids, [0, len(ids) // 2], 1.0),
        "key geometry": lambda: key_geometry(loaded, ids),
        "one layer's maps (layer 15)": lambda: attention_maps(loaded, ids, 15),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="512,2048")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded, plain = load_model(DEFAULT_MODEL), sdpa_model()
    print(f"model: {loaded.info.badge()}; torch threads: {torch.get_num_threads()}")
    print("| T | operation | median (s) | / plain forward |\n|---:|---|---:|---:|")
    for n_tokens in (int(t) for t in args.tokens.split(",")):
        ids = token_ids(loaded.tokenizer, n_tokens)
        ops = operations(loaded, plain, ids)
        times: dict[str, list[float]] = {name: [] for name in ops}
        with torch.inference_mode():
            for _ in range(args.repeats):
                for name, op in ops.items():
                    start = time.perf_counter()
                    op()
                    times[name].append(time.perf_counter() - start)
        base = statistics.median(times["plain forward (SDPA, logits)"])
        for name, found in times.items():
            print(f"| {n_tokens} | {name} | {statistics.median(found):.2f} | {statistics.median(found) / base:.2f} |")


if __name__ == "__main__":
    main()
