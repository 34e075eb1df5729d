"""Benchmark: ``analyze`` against a plain SDPA forward of the same decoder stack, on the bundled model.

Times are medians of repeats run alternately in one process (same noise for both); peak memory
is the peak resident set of a fresh process that loads the model and runs once. ``--load`` keeps a second
process busy on every core while measuring, as on a shared server, and adds CPU-time ratios (this process's
CPU seconds, which the other process's load does not inflate the way it inflates wall time).

    python bench/bench_analyze.py [--tokens 128,512,2048,8192] [--repeats 3] [--load]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydoc_data.topics import topics  # noqa: E402  (long English text that ships with Python)

import sinkscope  # noqa: E402, F401  (first: it sets OpenMP's wait policy, read when torch loads)
import torch  # noqa: E402
from sinkscope.core.bundled import DEFAULT_MODEL  # noqa: E402
from sinkscope.core.capture import analyze_ids  # noqa: E402
from sinkscope.core.models import LoadedModel, dequantized_dir, load_model  # noqa: E402
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


def seconds(run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one run."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


@contextmanager
def busy_machine(enabled: bool) -> Iterator[None]:
    """A second process doing matrix products on every core for as long as the block runs."""
    code = "import torch\nx = torch.randn(768, 768)\nwhile True:\n    x = torch.tanh(x @ x)"
    neighbour = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}  # OpenMP's own default: it spins
    burner = subprocess.Popen([sys.executable, "-c", code], env=neighbour) if enabled else None
    try:
        time.sleep(2 if enabled else 0)  # let it spin up
        yield
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()


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


def measure(loaded: LoadedModel, sdpa: torch.nn.Module, ids: list[int], repeats: int) -> dict[str, tuple]:
    """Median (wall, CPU) seconds of each way to run the text, interleaved so they share the machine's noise."""
    runs = {
        "full": partial(forward, sdpa, ids, True),
        "stack": partial(forward, sdpa, ids, False),
        "analyze": partial(analyze_ids, loaded, ids),
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(seconds(run))
    return {name: tuple(statistics.median(v[i] for v in values) for i in (0, 1)) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="128,512,2048,8192")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", choices=["plain", "analyze"], help=argparse.SUPPRESS)
    parser.add_argument("--load", action="store_true", help="measure while a second process keeps the CPU busy")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, int(args.tokens))
        return
    loaded = load_model(DEFAULT_MODEL)
    sdpa = sdpa_model()
    forward(sdpa, token_ids(loaded.tokenizer, 64), logits=True)  # warm-up
    policy = os.environ.get("OMP_WAIT_POLICY") or "OpenMP's default"
    print(f"model: {loaded.info.badge()}; torch threads: {torch.get_num_threads()}; wait policy: {policy}; "
          f"busy machine: {args.load}")  # fmt: skip
    print("plain = model(ids) with SDPA, logits included; stack = the decoder stack only (what analyze runs)")
    columns = ["T", "plain (s)", "stack (s)", "analyze (s)", "analyze/plain", "analyze/stack", "CPU analyze/plain"]
    columns += ["peak plain (GB)", "peak analyze (GB)"]
    print("| " + " | ".join(columns) + " |\n|" + "---:|" * len(columns))
    for n_tokens in map(int, args.tokens.split(",")):
        ids = token_ids(loaded.tokenizer, n_tokens)
        with busy_machine(args.load):
            t = measure(loaded, sdpa, ids, args.repeats if n_tokens <= 2048 else 1)
        (full, full_cpu), (stack, _), (ours, ours_cpu) = t["full"], t["stack"], t["analyze"]
        print(
            f"| {len(ids)} | {full:.2f} | {stack:.2f} | {ours:.2f} | {ours / full:.2f} | {ours / stack:.2f} | "
            f"{ours_cpu / full_cpu:.2f} | {peak_of('plain', n_tokens):.2f} | {peak_of('analyze', n_tokens):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
