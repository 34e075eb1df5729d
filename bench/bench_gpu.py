"""Benchmark for a machine with a CUDA GPU, in one call of a few minutes: is the GPU path exact, and is it fast.

    python bench/bench_gpu.py [--tokens 2048,8192] [--exact-tokens 512] [--repeats 3]

Prints one table:
- exactness: every per-head metric of the bundled model on CUDA (float32, then bfloat16) against the CPU float32
  reference on the same text: the largest difference per metric, and the heads whose kind differs;
- the analysis against a plain SDPA forward of the same weights on the same GPU (median wall time of
  ``--repeats`` runs taken in turns, and peak GPU memory) at each of ``--tokens``;
- the streaming page's default run (dense, window and sinks on the built-in text), in seconds;
- the KV lab's per-head map at ``--exact-tokens``, float32 (issue 53): a dense forward, the first-order estimate of
  every head, the page's map (the estimate, then exact where it cannot place a head) and the exact map of every head,
  in seconds and in forwards.
On a machine without CUDA it says so and stops.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sinkscope.core import texts
from sinkscope.core.bundled import DEFAULT_MODEL  # noqa: E402
from sinkscope.core.capture import analyze_ids  # noqa: E402
from sinkscope.core.errors import SinkscopeError  # noqa: E402
from sinkscope.core.models import dequantized_dir, load_model  # noqa: E402
from sinkscope.experiments import kv_heads, stream_plan  # noqa: E402
from sinkscope.experiments.streaming import dense  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from bench.bench_analyze import token_ids  # noqa: E402
from views.routes.streaming_page import DEFAULT_TOKENS  # noqa: E402

Row = tuple[str, str, str]  # (check, setting, measured)
DEVICE, DTYPE = "cuda", "bfloat16"  # what the speed rows run on: the app's default on a GPU


def exactness(n_tokens: int) -> list[Row]:
    """Each per-head metric on CUDA against the CPU float32 reference, for float32 and bfloat16."""
    reference_model = load_model(DEFAULT_MODEL, device="cpu", dtype="float32")
    ids = token_ids(reference_model.tokenizer, n_tokens)
    reference = analyze_ids(reference_model, ids).heads
    del reference_model
    rows = []
    for dtype in ("float32", "bfloat16"):
        where = f"exactness, T = {len(ids)}"
        try:
            found = analyze_ids(load_model(DEFAULT_MODEL, device=DEVICE, dtype=dtype), ids).heads
        except SinkscopeError as err:  # a dtype whose states overflow is a finding, not the end of the benchmark
            rows.append((where, dtype, err.message.text("en")))
            continue
        for name in sorted(set(reference) - {"kind"}):
            worst = float(np.nanmax(np.abs(found[name].astype(np.float64) - reference[name])))
            rows.append((where, f"{dtype}: {name}", f"max abs(CUDA - CPU) = {worst:.2e}"))
        flipped = int((found["kind"] != reference["kind"]).sum())
        rows.append((where, f"{dtype}: kind", f"{flipped} of {reference['kind'].size} heads differ"))
        torch.cuda.empty_cache()
    return rows


def timed(run: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def peak_gb(run: Callable[[], object]) -> float:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    run()
    return torch.cuda.max_memory_allocated() / 2**30


def against_sdpa(lengths: list[int], repeats: int) -> list[Row]:
    """The analysis against a plain SDPA forward (logits included) of the same weights on the GPU."""
    loaded = load_model(DEFAULT_MODEL, device=DEVICE, dtype=DTYPE)
    plain = AutoModelForCausalLM.from_pretrained(dequantized_dir(DEFAULT_MODEL), attn_implementation="sdpa",
                                                 dtype=getattr(torch, DTYPE)).to(DEVICE).eval()  # fmt: skip
    rows = []
    for n_tokens in lengths:
        ids = token_ids(loaded.tokenizer, n_tokens)
        tensor = torch.tensor([ids], device=DEVICE)  # (batch=1, token)
        runs = {
            "plain": partial(plain, input_ids=tensor, use_cache=False),
            "analyze": partial(analyze_ids, loaded, ids),
        }
        with torch.inference_mode():
            for run in runs.values():
                run()  # warm-up: kernels chosen and compiled
            times = {name: [] for name in runs}
            for _ in range(repeats):
                for name, run in runs.items():
                    times[name].append(timed(run))
            peaks = {name: peak_gb(run) for name, run in runs.items()}
        plain_s, ours_s = (statistics.median(times[name]) for name in runs)
        rows.append((f"analysis, T = {len(ids)}", f"{DTYPE}, median seconds",
                     f"plain {plain_s:.3f}, analyze {ours_s:.3f}, ratio {ours_s / plain_s:.2f}"))  # fmt: skip
        rows.append((f"analysis, T = {len(ids)}", "peak GPU memory (GB)",
                     f"plain {peaks['plain']:.2f}, analyze {peaks['analyze']:.2f}"))  # fmt: skip
    return rows


def streaming_default() -> list[Row]:
    """The streaming page's default run: its three methods on the built-in text, each job as the page runs it."""
    loaded = load_model(DEFAULT_MODEL, device=DEVICE, dtype=DTYPE)
    check = stream_plan.CHECK
    setup = stream_plan.StreamSetup(check.sinks, check.window, DEFAULT_TOKENS, ("dense", "window", "sinks"))
    ids = loaded.tokenizer(texts.builtin_text(), add_special_tokens=False)["input_ids"][: setup.tokens]
    seconds = timed(lambda: [stream_plan.run_job(loaded, ids, job, setup) for job in stream_plan.plan(setup)])
    return [("streaming page, default run", f"{setup.tokens} tokens, {', '.join(setup.methods)}", f"{seconds:.1f} s")]


def head_maps(n_tokens: int, budget: int = 64) -> list[Row]:
    """The per-head map's stages in float32 (the map's own precision), each once after a warm-up forward."""
    loaded = load_model(DEFAULT_MODEL, device=DEVICE, dtype="float32")
    ids = token_ids(loaded.tokenizer, n_tokens)
    dense(loaded, ids)  # warm-up
    forward = timed(lambda: dense(loaded, ids))
    estimate = timed(lambda: kv_heads.estimate_needs(loaded, ids, budget))
    first = kv_heads.estimate_needs(loaded, ids, budget)
    confirm = timed(lambda: kv_heads.confirm_needs(loaded, ids, first))
    exact = timed(lambda: kv_heads.head_needs(loaded, ids, budget))
    setting, left = f"T = {len(ids)}, cache {budget}, float32", int((~first.unsettled()).sum())
    return [("per-head map: dense forward", setting, f"{forward:.3f} s"),
            ("per-head map: estimate", setting, f"{estimate:.2f} s = {estimate / forward:.1f} forwards"),
            ("per-head map: page", setting, f"{estimate + confirm:.1f} s, {left} heads left estimated"),
            ("per-head map: exact", setting, f"{exact:.1f} s = {exact / forward:.0f} forwards")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="2048,8192")
    parser.add_argument("--exact-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("No CUDA device here: this benchmark measures the GPU path and needs one.")
        return
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    rows = exactness(args.exact_tokens)
    rows += against_sdpa([int(n) for n in args.tokens.split(",")], args.repeats)
    rows += streaming_default()
    rows += head_maps(args.exact_tokens)
    print("\n| check | setting | measured |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
