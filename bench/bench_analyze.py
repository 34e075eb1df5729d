"""Benchmark: ``analyze`` against a plain SDPA forward of the same decoder stack, on the bundled model.

Times are medians of repeats run alternately in one process (same noise for both); peak memory
is the peak resident set of a fresh process that loads the model and runs once.

    python bench/bench_analyze.py [--tokens 128,512,2048,8192] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydoc_data.topics import topics  # noqa: E402  (long English text that ships with Python)

import torch  # noqa: E402
from sinkscope.bundled import DEFAULT_MODEL  # noqa: E402
from sinkscope.capture import analyze_ids  # noqa: E402
from sinkscope.models import LoadedModel, dequantized_dir, load_model  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def token_ids(tokenizer: object, n_tokens: int) -> list[int]:
    text = "\n".join(topics.values())
    return tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]


def sdpa_model() -> torch.nn.Module:
    """The same weights under transformers' own SDPA attention, as a user would run them."""
    return AutoModelForCausalLM.from_pretrained(dequantized_dir(DEFAULT_MODEL), attn_implementation="sdpa").eval()


def forward(model: torch.nn.Module, ids: list[int], logits: bool) -> None:
    """A plain forward: the whole model (with the LM head's logits) or only its decoder stack."""
    with torch.inference_mode():
        (model if logits else model.base_model)(input_ids=torch.tensor([ids]), use_cache=False)


def seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def peak_rss_gb() -> float:
    """This process's peak resident memory. Not ru_maxrss: Linux carries that over from the forking parent."""
    status = Path("/proc/self/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    return kib / 2**20


def worker(mode: str, n_tokens: int) -> None:
    """One fresh process, one run: prints its peak memory."""
    if mode == "plain":
        tokenizer = AutoTokenizer.from_pretrained(dequantized_dir(DEFAULT_MODEL))
        forward(sdpa_model(), token_ids(tokenizer, n_tokens), logits=True)
    else:
        loaded = load_model(DEFAULT_MODEL)
        analyze_ids(loaded, token_ids(loaded.tokenizer, n_tokens))
    print(json.dumps({"peak_gb": peak_rss_gb()}))


def peak_of(mode: str, n_tokens: int) -> float:
    cmd = [sys.executable, __file__, "--worker", mode, "--tokens", str(n_tokens)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_gb"]


def measure(loaded: LoadedModel, sdpa: torch.nn.Module, ids: list[int], repeats: int) -> dict[str, float]:
    """Median seconds of each way to run the text, interleaved so they share the machine's noise."""
    runs = {
        "full": partial(forward, sdpa, ids, True),
        "stack": partial(forward, sdpa, ids, False),
        "analyze": partial(analyze_ids, loaded, ids),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(seconds(run))
    return {name: statistics.median(values) for name, values in times.items()}


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
    sdpa = sdpa_model()
    forward(sdpa, token_ids(loaded.tokenizer, 64), logits=True)  # warm-up
    print(f"model: {loaded.info.badge()}; torch threads: {torch.get_num_threads()}")
    print("plain = model(ids) with SDPA, logits included; stack = the decoder stack only (what analyze runs)")
    columns = ["T", "plain (s)", "stack (s)", "analyze (s)", "analyze/plain", "analyze/stack", "peak plain (GB)"]
    print("| " + " | ".join([*columns, "peak analyze (GB)"]) + " |")
    print("|" + "---:|" * (len(columns) + 1))
    for n_tokens in map(int, args.tokens.split(",")):
        ids = token_ids(loaded.tokenizer, n_tokens)
        t = measure(loaded, sdpa, ids, args.repeats if n_tokens <= 2048 else 1)
        print(
            f"| {len(ids)} | {t['full']:.2f} | {t['stack']:.2f} | {t['analyze']:.2f} | "
            f"{t['analyze'] / t['full']:.2f} | {t['analyze'] / t['stack']:.2f} | "
            f"{peak_of('plain', n_tokens):.2f} | {peak_of('analyze', n_tokens):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
