"""Benchmark (issue 53): how good the first-order estimate of each head's sinks + window restriction is, and what
confirming it costs. Per text and cache size, on the bundled model: the estimate (median of ``--repeats``), the exact
map of every head, and the page's map (estimate, then exact wherever the estimate's band reaches the threshold); the
Spearman correlation of estimate and exact over the heads, the share of heads whose side of the threshold the estimate
gets right before and after confirmation, the exact cells against the exact map, and the largest |exact - estimate|
(what ``kv_heads.ESTIMATE_MARGIN`` must cover).

    python bench/bench_heads.py [--tokens 512] [--budgets 64,32] [--texts help,en,fr] [--repeats 3]

Texts: Python's built-in help, this repository's docs/metrics.md (English) and docs/metrics.fr.md (French), their
first ``--tokens`` tokens. Wall seconds on this machine's CPU, float32: run it on an unloaded machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEXTS = {"help": None, "en": ROOT / "docs" / "metrics.md", "fr": ROOT / "docs" / "metrics.fr.md"}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    rank = lambda x: np.argsort(np.argsort(x)).astype(float)  # noqa: E731 (no ties among float loss changes)
    return float(np.corrcoef(rank(a), rank(b))[0, 1])


def timed(run: object, *args: object) -> tuple[object, float]:
    start = time.perf_counter()
    found = run(*args)
    return found, time.perf_counter() - start


def page_map(loaded: object, ids: list[int], budget: int) -> object:
    """What the KV page runs by default: the estimate, then exact wherever its band reaches the threshold."""
    from sinkscope.experiments import kv_heads

    return kv_heads.confirm_needs(loaded, ids, kv_heads.estimate_needs(loaded, ids, budget))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--budgets", default="64,32")
    parser.add_argument("--texts", default="help,en,fr")
    parser.add_argument("--repeats", type=int, default=3, help="of the estimate (the exact maps run once)")
    args = parser.parse_args()

    from sinkscope.core.models import load_model
    from sinkscope.core.texts import builtin_text
    from sinkscope.experiments import kv_heads
    from sinkscope.findings.words import NEEDS_CONTEXT

    loaded = load_model("smollm2-135m")
    threshold = np.log1p(NEEDS_CONTEXT)
    print("| text | cache | estimate s | exact map s | page map s | confirmed | Spearman | side, estimate | "
          "side, page | exact cells | largest error |\n|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for name in args.texts.split(","):
        path = TEXTS[name]
        text = builtin_text() if path is None else path.read_text(encoding="utf-8")
        ids = loaded.encode(text, args.tokens, truncate=True, add_bos=False)
        for budget in (int(b) for b in args.budgets.split(",")):
            seconds = []
            for _ in range(args.repeats):
                first, took = timed(kv_heads.estimate_needs, loaded, ids, budget)
                seconds.append(took)
            exact, exact_s = timed(kv_heads.head_needs, loaded, ids, budget)
            page, page_s = timed(page_map, loaded, ids, budget)
            confirmed = ~page.estimates
            same = np.abs(page.change[confirmed] - exact.change[confirmed]).max() if confirmed.any() else 0.0
            rho = spearman(first.change.ravel(), exact.change.ravel())
            print(f"| {name} | {budget} | {statistics.median(seconds):.1f} | {exact_s:.0f} | {page_s:.0f} | "
                  f"{int(confirmed.sum())} of {confirmed.size} | {rho:.3f} | "
                  f"{((first.change > threshold) == (exact.change > threshold)).mean():.1%} | "
                  f"{((page.change > threshold) == (exact.change > threshold)).mean():.1%} | "
                  f"{'equal' if same < 1e-5 else f'differ by {same:.1e}'} | "
                  f"{np.abs(exact.change - first.change).max():.4f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
