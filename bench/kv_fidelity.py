"""The KV lab's fidelity tables (issue 52): the English example through the quantized cache, bits x protection, for
KIVI's causal cache with R = 32 and R = 0 and the old non-causal bound, each ratio with its 95% bootstrap interval
and the sentence the page says; then the pass key check, cache size x policy, beside each cache's perplexity.

    python bench/kv_fidelity.py [--lengths 256,512] [--budgets 32,64,128] [--bits 2] [--skip-quantized]
                                [--skip-passkey]

Numbers, not timings: the bundled SmolLM2-135M-Instruct in float32 on this machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def quantized(loaded: object, trace: object) -> None:
    from sinkscope.core.loss import mean_difference
    from sinkscope.experiments import kv_quant

    for residual in (32, 0, None):
        rows = kv_quant.quantized_table(loaded, trace, (2, 3, 4), kv_quant.PROTECTIONS, residual)
        dense = rows[0]
        name = "non-causal bound" if residual is None else f"causal, R = {residual}"
        print(f"\n{name}: dense perplexity {dense.perplexity:.2f}\n")
        print("| bits | none | first4 | sinks |\n|---|---|---|---|")
        for bits in (2, 3, 4):
            cells = []
            for protect in kv_quant.PROTECTIONS:
                row = next(r for r in rows if (r.bits, r.protect) == (bits, protect))
                gap = mean_difference(row.nll, dense.nll)
                cells.append(f"{row.perplexity:.2f} (x{math.exp(gap.low):.3f}-{math.exp(gap.high):.3f})")
            print(f"| {bits} | " + " | ".join(cells) + " |")
        print("\n" + kv_quant.said(rows).text("en"))


def passkeys(loaded: object, lengths: list[int], budgets: list[int], bits: int) -> None:
    from sinkscope.experiments import passkey

    for n_tokens in lengths:
        print(f"\npass key text of {n_tokens} tokens, {bits}-bit caches: probability of the answer (perplexity before "
              "it)\n")  # fmt: skip
        table = {budget: passkey.passkey_table(loaded, n_tokens, budget, bits) for budget in budgets}
        names = [(row.kind, row.cache) for row in table[budgets[0]]]
        print("| cache | " + " | ".join(f"budget {b}" for b in budgets) + " |")
        print("|---|" + "---|" * len(budgets))
        for kind, cache in names:
            cells = []
            for budget in budgets:
                row = next(r for r in table[budget] if (r.kind, r.cache) == (kind, cache))
                cells.append(f"{row.probability:.2g} ({row.perplexity:.2f})")
            print(f"| {kind} {cache} | " + " | ".join(cells) + " |")
        print("\n" + passkey.said(table[budgets[0]], budgets[0]).text("en"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,512")
    parser.add_argument("--budgets", default="32,64,128")
    parser.add_argument("--bits", type=int, default=2, help="the pass key check's quantized caches")
    parser.add_argument("--skip-quantized", action="store_true")
    parser.add_argument("--skip-passkey", action="store_true")
    args = parser.parse_args()

    from sinkscope.core.capture import analyze_ids
    from sinkscope.core.models import load_model

    loaded = load_model("smollm2-135m")
    examples = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))
    text = next(example["text"] for example in examples if example["id"] == "english")
    trace = analyze_ids(loaded, loaded.encode(text, add_bos=False))
    print(f"English example: {trace.n_tokens} tokens")
    if not args.skip_quantized:
        quantized(loaded, trace)
    if not args.skip_passkey:
        lengths, budgets = ([int(n) for n in value.split(",")] for value in (args.lengths, args.budgets))
        passkeys(loaded, lengths, budgets, args.bits)


if __name__ == "__main__":
    main()
