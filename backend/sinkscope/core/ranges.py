"""Every number a user can pass (command line, library, link, widget) and the range it must lie in, checked
before any work starts: a number is bounded by what it makes the machine do, not only by what it means.

The command line's argument types (``sinkscope.cli.arguments.ranged``) and the library's functions read the same
table, so ``sinkscope cost --dim`` and ``sinkscope.experiments.cost.sweep(dim=...)`` refuse the same values.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from sinkscope.core.errors import InputError


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    why: str  # what the upper end keeps in bounds
    whole: bool = False  # a count: 7.5 tokens is refused, not rounded

    def check(self, name: str, value: float) -> None:
        """An InputError naming the argument, the value and the range when ``value`` is outside it (NumPy numbers
        count as numbers)."""
        kind = numbers.Integral if self.whole else numbers.Real  # NumPy's integers and floats register as these
        number = not isinstance(value, bool) and isinstance(value, kind) and math.isfinite(value)
        if not number or not self.low <= value <= self.high:
            key = "error.out_of_range_whole" if self.whole else "error.out_of_range"
            raise InputError(key, name=name, value=repr(value), low=self.low, high=self.high)


RANGES = {
    "dim": Range(2, 1024, "the cost sweep holds T x d embeddings and a d x d matrix per length"),
    "polarize_steps": Range(1, 200_000, "gradient steps of the value-softmax block, one per step"),
    "task_steps": Range(1, 50_000, "training steps of a tiny transformer (about 10 ms each here)"),
    "candidates": Range(2, 1024, "softmax entries of the polarization toy"),
    "samples": Range(1, 100_000, "training points of the polarization toy"),
    "lr": Range(1e-6, 10.0, "a learning rate past 10 only diverges"),
    "seed": Range(0, 2**32 - 1, "what a random generator takes"),
    "max_tokens": Range(1, 8192, "sinkscope.core.models.HARD_TOKEN_LIMIT"),
    "lengths": Range(2, 8192, "a window longer than the hard token limit is never cut"),
    "windows": Range(1, 1000, "windows per document and length"),
    "max_docs": Range(1, 10_000_000, "documents read when the corpus is opened"),
    "workers": Range(1, 1024, "Ray actors, one model each"),
    "gpus_per_worker": Range(0, 64, "a worker's share of GPUs"),
    "drop_first": Range(1, 8192, "keys dropped, at most the token limit"),
    "from_layer": Range(0, 1024, "layer outputs, at most a model's depth"),
    "position": Range(0, 8191, "a token position within the hard token limit", whole=True),
    "size": Range(0, 1000, "perturbation length in median embedding norms"),
    "stream_tokens": Range(2, 100_000, "one forward step per token"),
    "sinks": Range(0, 64, "first tokens kept in a streaming cache"),
    "window": Range(1, 8192, "recent tokens kept in a streaming cache"),
    "budget": Range(1, 8192, "tokens a compressed KV cache holds per layer and key-value head", whole=True),
    "share": Range(0.0, 1.0, "a share of heads"),
    "eps": Range(0.0, 1.0, "a threshold on attention weights, which lie in 0-1"),
    "factor": Range(0.0, 1000.0, "a multiple of a state; past 1,000 the stream overflows float16"),
    "top": Range(0, 8192, "heads measured exactly, a few seconds each", whole=True),
    "margin": Range(0.0, 10.0, "nats either way of an estimated loss change; a mean NLL change past 10 is none"),
    "n_tokens": Range(1, 8192, "sinkscope.core.models.HARD_TOKEN_LIMIT", whole=True),
}


def is_whole(value: object) -> bool:
    """An integer, NumPy's included, and not a bool (True is not 1 here)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def shown(value: object) -> str:
    """A value as an error message names it: an array or tensor by its type, dtype and shape, anything else by its
    repr, cut to a readable length."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__} of {value.dtype} with shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_choice(name: str, value: object, allowed: tuple) -> None:
    """An InputError naming ``name`` when ``value`` is not one of ``allowed`` (of the same kind: 2.0 is not a
    number of bits)."""
    same_kind = is_whole(value) if isinstance(allowed[0], int) else isinstance(value, str)
    if not (same_kind and value in allowed):
        raise InputError("error.unknown_choice", name=name, value=shown(value), choices=", ".join(map(str, allowed)))


def check(name: str, value: float) -> None:
    """``value`` within the documented range of the argument ``name`` (``RANGES``), else an InputError."""
    RANGES[name].check(name, value)
