"""The library checks what a careless caller passes: one clear error each, never a raw IndexError or NaN."""

from __future__ import annotations

import numpy as np
import pytest
import sinkscope
import torch
from sinkscope import interventions, streaming
from sinkscope.capture import analyze, analyze_ids, attention_maps
from sinkscope.errors import InputError
from sinkscope.interventions import DropFirst, Perturb, ReplaceFirst, intervene, outcome
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
    with pytest.raises(InputError, match="before the first token"):
        Perturb(-1, 1.0)
    with pytest.raises(InputError, match="vocabulary"):
        streaming.streaming_nll(loaded, [*random_ids, 500], "dense", 2, 4)


@pytest.mark.parametrize("size", [float("nan"), float("inf"), -1.0])
def test_a_perturbation_size_must_be_a_finite_distance(size: float) -> None:
    with pytest.raises(InputError, match="finite number of at least 0"):
        Perturb(3, size)


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
