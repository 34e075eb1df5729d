"""Benchmark: ``analyze`` against a plain SDPA forward of the same decoder stack, on the bundled model.

Times are medians of repeats run alternately in one process (same noise for both); peak memory
is the peak resident set of a fresh process that loads the model and runs once.

    python bench/bench_analyze.py [--tokens 128,512,2048,8192] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from pydoc_data.topics import topics  # noqa: E402  (long English text that ships with Python)
from transformers import AutoModelForCausalLM  # noqa: E402

from backend.capture import analyze_ids  # noqa: E402
from backend.models import DEFAULT_MODEL, LoadedModel, load_model  # noqa: E402


def token_ids(loaded: LoadedModel, n_tokens: int) -> list[int]:
    text = "\n".join(topics.values())
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]


def sdpa_twin(loaded: LoadedModel) -> torch.nn.Module:
    """The same weights under transformers' own SDPA attention, as a user would run them."""
    source = loaded.model.config._name_or_path
    return AutoModelForCausalLM.from_pretrained(source, attn_implementation="sdpa").eval()


def plain_forward(model: torch.nn.Module, ids: list[int]) -> None:
    with torch.inference_mode():
        model.base_model(input_ids=torch.tensor([ids]), use_cache=False)


def seconds(run: object) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def worker(mode: str, n_tokens: int) -> None:
    """One fresh process, one run: prints its peak memory."""
    loaded = load_model(DEFAULT_MODEL)
    ids = token_ids(loaded, n_tokens)
    if mode == "plain":
        plain_forward(sdpa_twin(loaded), ids)
    else:
        analyze_ids(loaded, ids)
    print(json.dumps({"peak_gb": peak_rss_gb()}))


def peak_of(mode: str, n_tokens: int) -> float:
    cmd = [sys.executable, __file__, "--worker", mode, "--tokens", str(n_tokens)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_gb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="128,512,2048,8192")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", choices=["plain", "analyze"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, int(args.tokens))
        return
    loaded = load_model(DEFAULT_MODEL)
    twin = sdpa_twin(loaded)
    print(f"model: {loaded.info.badge()}; torch threads: {torch.get_num_threads()}")
    print("| T | plain SDPA forward (s) | analyze (s) | ratio | peak plain (GB) | peak analyze (GB) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n_tokens in map(int, args.tokens.split(",")):
        ids = token_ids(loaded, n_tokens)
        repeats = args.repeats if n_tokens <= 2048 else 1
        plain_forward(twin, ids[:64])  # warm-up
        plain, full = [], []
        for _ in range(repeats):
            plain.append(seconds(lambda: plain_forward(twin, ids)))
            full.append(seconds(lambda: analyze_ids(loaded, ids)))
        p, a = statistics.median(plain), statistics.median(full)
        print(
            f"| {len(ids)} | {p:.2f} | {a:.2f} | {a / p:.2f} | "
            f"{peak_of('plain', n_tokens):.2f} | {peak_of('analyze', n_tokens):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
