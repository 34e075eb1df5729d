"""Benchmark: the sinks streaming loop against plain Hugging Face decoding with a full KV cache.

    python bench/bench_streaming.py [--tokens 1024,4096,16384] [--sinks 4 --window 1020]

Each (method, length) runs in a fresh process: tokens per second, and resident memory when the
stream is a quarter, half and all the way through (flat for sinks, growing for the full cache).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from sinkscope.core import texts
from sinkscope.core.bundled import DEFAULT_MODEL  # noqa: E402
from sinkscope.core.models import load_model  # noqa: E402
from sinkscope.experiments import streaming  # noqa: E402
from transformers import DynamicCache  # noqa: E402


def rss_gb() -> float:
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 2**20


def full_cache_steps(loaded: object, ids: list[int], checkpoints: set[int], memory: list[float]) -> None:
    cache = DynamicCache()
    with torch.inference_mode():
        for t, token in enumerate(ids):
            loaded.model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            if t + 1 in checkpoints:
                memory.append(rss_gb())


def sink_steps(
    loaded: object, ids: list[int], checkpoints: set[int], memory: list[float], sinks: int, window: int
) -> None:
    with streaming.streamer(loaded, (sinks,), sinks + window) as (step, _):
        for t, token in enumerate(ids):
            step([token])
            if t + 1 in checkpoints:
                memory.append(rss_gb())


def worker(method: str, n_tokens: int, sinks: int, window: int) -> None:
    loaded = load_model(DEFAULT_MODEL)
    ids = (loaded.tokenizer(texts.builtin_text(), add_special_tokens=False)["input_ids"] * 8)[:n_tokens]
    checkpoints, memory = {n_tokens // 4, n_tokens // 2, n_tokens}, []
    start = time.perf_counter()
    if method == "sinks":
        sink_steps(loaded, ids, checkpoints, memory, sinks, window)
    else:
        full_cache_steps(loaded, ids, checkpoints, memory)
    print(json.dumps({"tokens_per_s": n_tokens / (time.perf_counter() - start), "memory": memory}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="1024,4096,16384")
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--window", type=int, default=1020)
    parser.add_argument("--methods", default="sinks,full")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, int(args.tokens), args.sinks, args.window)
        return
    print(f"cache for sinks: {args.sinks} + {args.window}; full = Hugging Face DynamicCache (SDPA)")
    print("| tokens | method | tokens/s | RSS at 1/4, 1/2, end (GB) |")
    print("|---:|---|---:|---|")
    for n_tokens in args.tokens.split(","):
        for method in args.methods.split(","):
            command = [sys.executable, __file__, "--worker", method, "--tokens", n_tokens]
            command += ["--sinks", str(args.sinks), "--window", str(args.window)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            memory = ", ".join(f"{m:.2f}" for m in result["memory"])
            print(f"| {n_tokens} | {method} | {result['tokens_per_s']:.1f} | {memory} |", flush=True)


if __name__ == "__main__":
    main()
