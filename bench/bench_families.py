"""Benchmark: the slow path against the fast path, at one model shape (SmolLM2-135M's: 30 layers of 9 heads, width 576).

The fast path is Sinkscope's kernel on a Llama of that shape; the slow path reads every map from a Bloom of the same
shape (its attention runs in its own code, ALiBi). Both are random: the cost of a forward does not depend on what the
weights learned. A plain SDPA forward of the Llama is the floor. Times are medians of repeats run alternately in one
process, so both paths share the machine's noise.

    python bench/bench_families.py [--tokens 128,512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sinkscope  # noqa: E402, F401  (first: it sets OpenMP's wait policy, read when torch loads)
import torch  # noqa: E402
from sinkscope.core import attention  # noqa: E402
from sinkscope.core.capture import analyze_ids  # noqa: E402
from sinkscope.core.models import LoadedModel, check_capture, implementation_for, model_info  # noqa: E402
from transformers import AutoModelForCausalLM, BloomConfig, LlamaConfig  # noqa: E402

SHAPE = {"layers": 30, "heads": 9, "width": 576, "vocab": 49152}  # SmolLM2-135M


def built(config: object, implementation: str) -> torch.nn.Module:
    torch.manual_seed(0)  # a copy: from_config writes the implementation into the config it is given
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=implementation)
    return model.eval().requires_grad_(False)


def models() -> dict[str, object]:
    """The fast path's Llama, the slow path's Bloom (both loaded as Sinkscope loads them) and the SDPA floor."""
    attention.register()
    llama = LlamaConfig(vocab_size=SHAPE["vocab"], hidden_size=SHAPE["width"], intermediate_size=1536,
                        num_hidden_layers=SHAPE["layers"], num_attention_heads=SHAPE["heads"], num_key_value_heads=3,
                        max_position_embeddings=8192)  # fmt: skip
    bloom = BloomConfig(vocab_size=SHAPE["vocab"], hidden_size=SHAPE["width"], n_layer=SHAPE["layers"],
                        n_head=SHAPE["heads"])  # fmt: skip
    loaded = {}
    for name, config in (("fast path (Llama)", llama), ("slow path (Bloom)", bloom)):
        model = built(config, implementation_for(config))
        check_capture(model)
        loaded[name] = LoadedModel(model, None, model_info(model, name, name))
    loaded["SDPA forward (Llama)"] = built(llama, "sdpa")
    return loaded


def run(subject: object, ids: list[int]) -> Callable[[], object]:
    if isinstance(subject, LoadedModel):
        return lambda: analyze_ids(subject, ids)
    return lambda: subject(input_ids=torch.tensor([ids]), use_cache=False)


def median_seconds(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each run ``repeats`` times, alternating, after one warm-up each: the median wall seconds."""
    for go in runs.values():
        go()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, go in runs.items():
            start = time.perf_counter()
            with torch.inference_mode():
                go()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="128,512")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    subjects = models()
    print(f"| T | {' | '.join(subjects)} | slow / fast | slow path's token limit |")
    print("|---|" + "---|" * (len(subjects) + 2))
    limit = subjects["slow path (Bloom)"].info.max_tokens
    for n_tokens in map(int, args.tokens.split(",")):
        ids = torch.randint(3, SHAPE["vocab"], (n_tokens,), generator=torch.Generator().manual_seed(1)).tolist()
        times = median_seconds({name: run(subject, ids) for name, subject in subjects.items()}, args.repeats)
        ratio = times["slow path (Bloom)"] / times["fast path (Llama)"]
        cells = " | ".join(f"{seconds:.2f} s" for seconds in times.values())
        print(f"| {n_tokens} | {cells} | {ratio:.2f}x | {limit} |", flush=True)


if __name__ == "__main__":
    main()
