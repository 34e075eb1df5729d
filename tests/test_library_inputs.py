"""The library checks what a careless caller passes: one clear error each, never a raw IndexError or NaN."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import sinkscope
import torch
from sinkscope.core.capture import analyze, analyze_ids, attention_maps
from sinkscope.core.errors import InputError
from sinkscope.experiments import cost, interventions, streaming
from sinkscope.experiments.interventions import DropFirst, Perturb, ReplaceFirst, intervene, outcome
from transformers import AutoTokenizer

from tests.conftest import tiny_loaded
from tests.tiny import build_tiny_model_dir


@pytest.mark.parametrize("given", ["smollm2-135m", None, {"model": 1}, torch.nn.Linear(2, 2)])
def test_a_model_argument_that_is_not_a_loaded_model_says_to_call_load_model(given: object) -> None:
    with pytest.raises(TypeError, match=r"sinkscope\.load_model") as err:
        sinkscope.analyze(given, "hello")
    assert (repr(given) if isinstance(given, str) else type(given).__name__) in str(err.value)
    with pytest.raises(TypeError, match="load_model"):
        attention_maps(given, [1, 2, 3], 0)
    with pytest.raises(TypeError, match="load_model"), intervene(given, DropFirst(1, (0,))):
        pass


def test_a_tokenizer_is_not_a_model(tiny_dir: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    with pytest.raises(TypeError, match=f"got {type(tokenizer).__name__}: call model = sinkscope.load_model"):
        analyze(tokenizer, "hello")


def test_ids_and_positions_out_of_range_are_input_errors(random_ids: list[int]) -> None:
    loaded = tiny_loaded("llama-gqa")
    with pytest.raises(InputError, match="Token id 96 is not in the model's vocabulary"):
        analyze_ids(loaded, [*random_ids[:5], 96])
    with pytest.raises(InputError, match="vocabulary"):
        analyze_ids(loaded, [-1, 3])
    with pytest.raises(InputError, match="1000000000"), intervene(loaded, ReplaceFirst(10**9, "x")):
        analyze_ids(loaded, random_ids)
    with pytest.raises(InputError, match="Position 999 is past the last token"):
        outcome(loaded, random_ids, Perturb(999, 1.0))
    with pytest.raises(InputError, match="position must be a number from 0 to 8,191, not -1"):
        Perturb(-1, 1.0)
    with pytest.raises(InputError, match="vocabulary"):
        streaming.streaming_nll(loaded, [*random_ids, 500], "dense", 2, 4)


@pytest.mark.parametrize("size", [float("nan"), float("inf"), -1.0, 1e6])
def test_a_perturbation_size_must_be_a_finite_distance(size: float) -> None:
    with pytest.raises(InputError, match="size must be a number from 0 to 1,000"):
        Perturb(3, size)


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: sinkscope.polarize(steps=10**12), "polarize_steps must be a number from 1 to 200,000"),
        (lambda: sinkscope.polarize(dim=100_000_000), "dim must be a number from 2 to 1,024"),
        (lambda: sinkscope.train("backcopy", "softmax", steps=10**9), "task_steps must be a number from 1 to 50,000"),
        (lambda: cost.sweep(dim=100_000_000), "dim must be a number from 2 to 1,024"),
        (lambda: streaming.streaming_nll(tiny_loaded("llama-gqa"), [1, 2, 3], "window", 10**6, 4), "sinks must be"),
    ],
)  # fmt: skip
def test_numbers_without_an_upper_bound_are_refused_before_any_work(call: object, said: str) -> None:
    started = time.perf_counter()
    with pytest.raises(InputError, match=said):
        call()
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    "args",
    [["cost", "--dim", "100000000"], ["lab", "polarize", "--steps", "1000000000000"],
     ["census", "builtin", "--out", "x", "--lengths", "16,99999"], ["stream", "--sinks", "100000"]],
)  # fmt: skip
def test_the_command_line_refuses_the_same_numbers_in_one_line(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "sinkscope", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "must be between" in done.stderr


def test_a_lone_surrogate_in_the_text_is_named_not_a_type_error(tmp_path: object) -> None:
    loaded = sinkscope.load_model(str(build_tiny_model_dir(tmp_path)))
    with pytest.raises(InputError, match=r"U\+D800.*character 6"):
        analyze(loaded, "Sinks \ud800 everywhere")


def test_nested_interventions_compose_outer_first(random_ids: list[int]) -> None:
    """Dropping key 0 in layer 0 (outer) and in layer 1 (inner) at once equals both given together."""
    loaded = tiny_loaded("llama-gqa")
    with intervene(loaded, DropFirst(1, (0,))), intervene(loaded, DropFirst(1, (1,))) as inner:
        nested = analyze_ids(loaded, random_ids)
    assert isinstance(inner, interventions.Together) and len(inner.parts) == 2
    with intervene(loaded, DropFirst(1, (0,)), DropFirst(1, (1,))):
        together = analyze_ids(loaded, random_ids)
    np.testing.assert_array_equal(nested.heads["sink"], together.heads["sink"])
    assert np.all(nested.heads["sink"][:2] == 0) and np.all(nested.heads["sink"][2] > 0)
    with intervene(loaded, DropFirst(1, (0,))):
        after_inner_block = analyze_ids(loaded, random_ids)
    assert np.all(after_inner_block.heads["sink"][1] > 0)  # the inner change ended with its block


def test_numpy_token_ids_are_analyzed_like_python_ints(tiny_dir: str) -> None:
    """A Ray batch or a numpy array hands ids over as numpy integers: the tokens still display."""
    loaded = sinkscope.load_model(tiny_dir)
    ids = loaded.tokenizer("Sinks park attention.", add_special_tokens=False)["input_ids"]
    as_numpy = analyze_ids(loaded, np.array(ids, dtype=np.int64))
    assert as_numpy.tokens == analyze_ids(loaded, ids).tokens and as_numpy.token_ids == tuple(ids)
