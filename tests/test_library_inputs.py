"""The library checks what a careless caller passes: one clear error each, never a raw IndexError or NaN."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import sinkscope
import torch
from sinkscope.core.capture import analyze, analyze_ids, attention_maps
from sinkscope.core.errors import InputError, ModelLoadError, TokenLimitError
from sinkscope.experiments import cost, interventions, kv_evict, kv_heads, kv_quant, qk, streaming, writes
from sinkscope.experiments.elsewhere import MakeSink
from sinkscope.experiments.interventions import DropFirst, Perturb, ReplaceFirst, intervene, outcome
from sinkscope.findings import origins
from transformers import AutoTokenizer

from tests.tiny import build_tiny_model_dir, loaded_tiny, tiny_loaded


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
    with pytest.raises(InputError, match="position must be a whole number from 0 to 8,191, not -1"):
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


def _bad_calls(loaded: object) -> list[tuple[object, str]]:
    """(a call, what its error says): each bad value issue 38 found, and more of the same kind."""
    ids = [1, 5, 7, 9]
    last = loaded.info.n_layers - 1
    return [
        (lambda: DropFirst(-1, (0,)), "drop_first must be a number from 1"),
        (lambda: DropFirst(0, (0,)), "drop_first must be a number from 1"),
        (lambda: DropFirst(10**9, (0,)), "drop_first must be a number from 1 to 8,192"),
        (lambda: DropFirst(1, ()), "Name at least one layer"),
        (lambda: outcome(loaded, ids, DropFirst(1, (99,))), f"Layer 99 is outside this model's layers 0-{last}"),
        (lambda: outcome(loaded, ids, DropFirst(1, (-1,))), f"Layer -1 is outside this model's layers 0-{last}"),
        (lambda: outcome(loaded, ids, interventions.ForceHeads(((0, 99),), "sink")), "Head 99 is outside"),
        (lambda: interventions.ForceHeads(((0, 0),), "sideways"), "to must be one of sink, diagonal, uniform"),
        (lambda: interventions.SetActivations(((0, 1),), None, -1), "from_layer must be a number from 0"),
        (lambda: analyze(loaded, "a b c", max_tokens=0), "max_tokens must be a number from 1 to 8,192, not 0"),
        (lambda: analyze(loaded, "a b c", max_tokens="5"), "max_tokens must be a number from 1 to 8,192, not '5'"),
        (lambda: analyze(loaded, "a b c", add_bos="yes"), "add_bos must be True or False, not 'yes'"),
        (lambda: analyze(loaded, "a b c", truncate=1), "truncate must be True or False, not 1"),
        (lambda: analyze(loaded, b"a b c"), "text must be a str, not b'a b c'"),
        (lambda: analyze(loaded, 12345), "text must be a str, not 12345"),
        (lambda: analyze_ids(loaded, "1 2 3"), "ids must be a list of token ids"),
        (lambda: analyze_ids(loaded, [5] * (loaded.info.max_tokens + 1)), f"limit is {loaded.info.max_tokens:,}"),
        (lambda: attention_maps(loaded, ids, layer=1.5), "Layer 1.5 is outside"),
        (lambda: attention_maps(loaded, ids, layer=True), "Layer True is outside"),
        (lambda: attention_maps(loaded, [], 0), "The text is empty"),
        (lambda: attention_maps(loaded, ids, 1, start=np.zeros((2, 3))), "start must be the layer's input"),
    ]


def test_every_public_function_refuses_a_bad_argument_with_one_sentence_naming_it() -> None:
    """Issue 38, item 1: the library trusted its arguments (DropFirst(-1) silently dropped every key but the last;
    analyze_ids ignored the token limit; raw AttributeError, TypeError, KeyError, RuntimeError)."""
    loaded = tiny_loaded("llama-gqa")
    for call, said in _bad_calls(loaded):
        with pytest.raises(InputError) as err:
            call()
        assert said in str(err.value), (said, str(err.value))


def test_intervene_refuses_what_is_not_an_intervention() -> None:
    loaded = tiny_loaded("llama-gqa")
    with pytest.raises(InputError, match="'drop' is not an intervention"), intervene(loaded, "drop"):
        pass


def test_a_model_moved_to_meta_is_named_not_a_torch_error(random_ids: list[int]) -> None:
    loaded = tiny_loaded("llama-gqa")
    loaded.model.to("meta")
    with pytest.raises(ModelLoadError, match="on the meta device"):
        analyze_ids(loaded, random_ids)
    with pytest.raises(ModelLoadError, match="on the meta device"):
        attention_maps(loaded, random_ids, 0)


@pytest.mark.parametrize("spec", [None, 12, b"smollm2-135m"])
def test_a_model_name_that_is_not_text_is_named(spec: object) -> None:
    with pytest.raises(InputError, match="spec must be a model name"):
        sinkscope.load_model(spec)


KV_REFUSALS = [  # (what runs, the words of its refusal): issue 54, items 1-6
    (lambda m, ids: kv_evict.evict(m, ids[:13], 12), "never fills on a text of 13 tokens"),
    (lambda m, ids: kv_evict.evict(m, ids, 7.5), "budget must be a whole number from 1 to 8,192, not 7.5"),
    (lambda m, ids: kv_evict.evict(m, ids, 4), "cannot hold the 4 sinks"),
    (lambda m, ids: kv_heads.head_needs(m, ids, 3), "cannot hold the 4 sinks"),
    (lambda m, ids: kv_heads.head_needs(m, ids, len(ids) - 1), "never fills"),
    (lambda m, ids: kv_quant.quantized_nll(m, ids[:1], 2, torch.zeros(1, dtype=torch.bool)), "at least two tokens"),
    (lambda m, ids: kv_quant.quantized_table(m, analyze_ids(m, ids[:1]), (2,)), "at least two tokens"),
    (lambda m, ids: writes.remove_write(m, ids, 1, "mlp", eps=float("nan")), "eps must be a number from 0"),
    (lambda m, ids: writes.remove_write(m, ids, 1, "mlp", eps=-1.0), "eps must be a number from 0"),
    (lambda m, ids: writes.remove_write(m, ids, 1, "mlp", eps=5.0), "eps must be a number from 0"),
]  # fmt: skip


@pytest.mark.parametrize(("run", "words"), KV_REFUSALS)
def test_a_kv_experiment_refuses_a_measurement_that_cannot_happen(run: object, words: str,
                                                                  random_ids: list[int]) -> None:  # fmt: skip
    with pytest.raises(InputError, match=re.escape(words)):
        run(loaded_tiny("llama"), random_ids)


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_a_policy_curve_refuses_a_share_outside_0_to_1(share: float, random_ids: list[int]) -> None:
    loaded = loaded_tiny("llama")
    needs = kv_heads.HeadNeeds(12, np.zeros(len(random_ids) - 1), np.zeros((3, 4)))
    with pytest.raises(InputError, match="share must be a number from 0"):
        kv_heads.policy_curve(loaded, random_ids, needs, (0.0, share))


def test_a_budget_given_as_a_numpy_integer_is_a_number(random_ids: list[int]) -> None:
    found = kv_evict.evict(loaded_tiny("llama"), random_ids, np.int64(12))
    assert found.budget == 12 and not np.isnan(found.first_kept).any()


@pytest.mark.parametrize("run", [
    lambda m, ids: kv_quant.quantized_nll(m, ids, 2, torch.zeros(len(ids), dtype=torch.bool)),
    lambda m, ids: kv_evict.evict(m, ids, 64),
    lambda m, ids: kv_heads.head_needs(m, ids, 64),
    lambda m, ids: kv_heads.duo_policy(m, ids, kv_heads.HeadNeeds(64, np.zeros(3), np.zeros((3, 4)))),
    lambda m, ids: qk.qk_attribution(m, ids, 1, 0),
    lambda m, ids: writes.remove_write(m, ids, 1, "mlp"),
])  # fmt: skip
def test_an_experiment_refuses_a_text_over_the_token_limit_before_any_work(run: object) -> None:
    loaded = loaded_tiny("llama")
    too_long = [3] * (loaded.info.max_tokens + 1)
    with pytest.raises(TokenLimitError):
        run(loaded, too_long)


@pytest.mark.parametrize("given", ["a trace", None, {"heads": {}}])
def test_a_trace_argument_that_is_not_an_analysis_says_what_to_pass(given: object) -> None:
    with pytest.raises(TypeError, match=r"sinkscope\.analyze\(model, text\)"):
        writes.first_writes(given)
    with pytest.raises(TypeError, match=r"sinkscope\.analyze\(model, text\)"):
        origins.secondary_sinks(given)


def test_an_analysis_without_writes_is_refused_by_name(random_ids: list[int]) -> None:
    trace = dataclasses.replace(analyze_ids(loaded_tiny("llama"), random_ids), writes=None)  # as Jamba's or Bloom's
    with pytest.raises(InputError, match="keeps no per-block writes"):
        writes.first_writes(trace)


def test_a_head_score_needs_two_tokens_and_a_sink_made_elsewhere_a_finite_factor() -> None:
    with pytest.raises(InputError, match="needs at least two tokens, and it has 0"):
        qk.qk_attribution(loaded_tiny("llama"), [], 1, 0)
    with pytest.raises(InputError, match="factor must be a number from 0"):
        MakeSink(2, 1, (), float("nan"))


@pytest.mark.parametrize(("ids", "said"), [([1, True, 3], "Token id True is not"),
                                           ([1, torch.tensor(504), 3], "Token id 504 is not")])  # fmt: skip
def test_a_bool_is_not_a_token_id_and_a_tensor_id_is_named_by_its_number(ids: list, said: str) -> None:
    with pytest.raises(InputError, match=said):
        analyze_ids(tiny_loaded("llama-gqa"), ids)


def _needs(loaded: object, n_tokens: int, budget: int = 12) -> kv_heads.HeadNeeds:
    """A per-head map of ``loaded``'s heads (every change 0), for the functions that take one."""
    return kv_heads.HeadNeeds(budget, np.zeros(n_tokens - 1), np.zeros((loaded.info.n_layers, loaded.info.n_heads)))


EDGE_REFUSALS = {  # issue 54, items 11-12: what each public function said before (a raw error) -> one sentence now
    "quantized_table, bits a lone number": (lambda m, ids, t: kv_quant.quantized_table(m, t, bits=2),
                                            InputError, "bits must be a list of some of 2, 3, 4, 8"),
    "quantized_table, protections a lone word": (lambda m, ids, t: kv_quant.quantized_table(m, t, protections="sinks"),
                                                 InputError, "protections must be a list of some of none"),
    "quantized_table, bits of 2.0": (lambda m, ids, t: kv_quant.quantized_table(m, t, bits=(2.0,)),
                                     InputError, "bits must be one of 2, 3, 4, 8, not 2.0"),
    "quantized_table, a trace given as text": (lambda m, ids, t: kv_quant.quantized_table(m, "a trace"),
                                               TypeError, "expected an analysis"),
    "quantized_table, a model given as text": (lambda m, ids, t: kv_quant.quantized_table("smollm2-135m", t),
                                               TypeError, "sinkscope.load_model"),
    "quantized_table, another model's trace": (
        lambda m, ids, t: kv_quant.quantized_table(m, dataclasses.replace(t, model="gemma3-270m")),
        InputError, "made with gemma3-270m, and the model given is llama"),
    "quantized_nll, kept the wrong length": (
        lambda m, ids, t: kv_quant.quantized_nll(m, ids, 2, torch.zeros(3, dtype=torch.bool)),
        InputError, "for each of the text's 37 tokens"),
    "quantized_nll, kept as floats": (lambda m, ids, t: kv_quant.quantized_nll(m, ids, 2, torch.zeros(len(ids))),
                                      InputError, "not Tensor of torch.float32 with shape (37,)"),
    "quantized_nll, kept as text": (lambda m, ids, t: kv_quant.quantized_nll(m, ids, 2, "sinks"),
                                    InputError, "not 'sinks'"),
    "evict, one token": (lambda m, ids, t: kv_evict.evict(m, [5], 8), InputError, "on a text of 1 token:"),
    "evict, ids given as bools": (lambda m, ids, t: kv_evict.evict(m, [True] * 20, 8),
                                  InputError, "Token id True is not in the model's vocabulary (ids 0 to 95)"),
    "head_needs, no ids": (lambda m, ids, t: kv_heads.head_needs(m, [], 8), InputError, "on a text of 0 tokens"),
    "estimate_needs, no ids": (lambda m, ids, t: kv_heads.estimate_needs(m, [], 8), InputError, "never fills"),
    "estimate_needs, a margin of nan": (lambda m, ids, t: kv_heads.estimate_needs(m, ids, 8, margin=float("nan")),
                                        InputError, "margin must be a number from 0 to 10, not nan"),
    "duo_policy, no ids": (lambda m, ids, t: kv_heads.duo_policy(m, [], _needs(m, 37)), InputError, "never fills"),
    "duo_policy, needs=None": (lambda m, ids, t: kv_heads.duo_policy(m, ids, None),
                               TypeError, "expected a per-head map"),
    "duo_policy, another model's map": (
        lambda m, ids, t: kv_heads.duo_policy(m, ids, kv_heads.HeadNeeds(12, np.zeros(36), np.zeros((30, 9)))),
        InputError, "holds 30 x 9 layers x heads, and the model given has 3 x 4"),
    "duo_policy, whole of the wrong shape": (
        lambda m, ids, t: kv_heads.duo_policy(m, ids, _needs(m, 37), whole=np.ones((2, 2), dtype=bool)),
        InputError, "(3 x 2)"),
    "duo_policy, whole as shares": (
        lambda m, ids, t: kv_heads.duo_policy(m, ids, _needs(m, 37), whole=np.full((3, 2), 0.5)),
        InputError, "not ndarray of float64 with shape (3, 2)"),
    "policy_curve, needs=None": (lambda m, ids, t: kv_heads.policy_curve(m, ids, None),
                                 TypeError, "expected a per-head map"),
    "confirm_needs, first=None": (lambda m, ids, t: kv_heads.confirm_needs(m, ids, None),
                                  TypeError, "expected a per-head map"),
    "whole_heads, an unknown order": (lambda m, ids, t: kv_heads.whole_heads(_needs(m, 37), 2, 0.5, "largest"),
                                      InputError, "order must be one of ranked, random"),
    "qk_attribution, head 1.5": (lambda m, ids, t: qk.qk_attribution(m, ids, 1, 1.5),
                                 InputError, "Head 1.5 is outside this model's heads 0-3"),
    "make_sink, position 2.5": (lambda m, ids, t: sinkscope.make_sink(m, t, 2.5, 1),
                                InputError, "position must be a whole number from 0 to 8,191, not 2.5"),
    "make_sink, factor as text": (lambda m, ids, t: sinkscope.make_sink(m, t, 2, 1, factor="10"),
                                  InputError, "factor must be a number from 0 to 1,000, not '10'"),
    "make_sink, trace=None": (lambda m, ids, t: sinkscope.make_sink(m, None, 2, 1), TypeError, "expected an analysis"),
    "sink_heads, top 1.5": (lambda m, ids, t: sinkscope.sink_heads(m, ids, top=1.5),
                            InputError, "top must be a whole number from 0 to 8,192, not 1.5"),
    "held_out_ids, no tokens": (lambda m, ids, t: kv_heads.held_out_ids(m, 0),
                                InputError, "n_tokens must be a whole number from 1"),
}  # fmt: skip


@pytest.mark.parametrize("case", EDGE_REFUSALS)
def test_every_public_function_checks_its_arguments_at_the_edge(case: str, random_ids: list[int]) -> None:
    """Issue 54, item 2: each input names what is wrong in one sentence (a raw IndexError, AttributeError or torch
    RuntimeError before), before any work."""
    run, error, words = EDGE_REFUSALS[case]
    loaded = loaded_tiny("llama")
    with pytest.raises(error, match=re.escape(words)):
        run(loaded, random_ids, analyze_ids(loaded, random_ids))


def test_kept_given_as_a_list_of_bools_is_the_same_cache_as_the_tensor(random_ids: list[int]) -> None:
    loaded, kept = loaded_tiny("llama"), [i < 4 for i in range(len(random_ids))]
    as_list = kv_quant.quantized_nll(loaded, random_ids, 2, kept)
    np.testing.assert_array_equal(as_list, kv_quant.quantized_nll(loaded, random_ids, 2, torch.tensor(kept)))


def test_a_bfloat16_model_is_refused_by_its_precision_not_as_a_post_norm_block(random_ids: list[int]) -> None:
    """Issue 54, item 12: a Llama moved to bfloat16 (what a GPU user gets) was refused as "a norm after each block";
    in float32 the same head's split is the model's own."""
    with pytest.raises(InputError, match="held in bfloat16") as err:
        qk.qk_attribution(loaded_tiny("llama", torch.bfloat16), random_ids, 2, 0)
    assert "norm after each block" not in str(err.value)
    assert np.isfinite(qk.qk_attribution(loaded_tiny("llama"), random_ids, 2, 0).terms).all()


BFLOAT16_RUNS = {  # issue 54, item 2: what a GPU user's bfloat16 model gets from each experiment: finite numbers
    "analyze": lambda m, ids: analyze_ids(m, ids).heads["sink"],
    "evict": lambda m, ids: kv_evict.evict(m, ids, 12).nll,
    "quantized_nll": lambda m, ids: kv_quant.quantized_nll(m, ids, 2, torch.zeros(len(ids), dtype=torch.bool)),
    "estimate_needs": lambda m, ids: kv_heads.estimate_needs(m, ids, 12).change,
    "head_needs": lambda m, ids: kv_heads.head_needs(m, ids, 12).change,
    "sink_heads": lambda m, ids: sinkscope.sink_heads(m, ids, top=2).change,
    "remove_write": lambda m, ids: writes.remove_write(m, ids, 1, "mlp").changed.nll,
    "make_sink": lambda m, ids: sinkscope.make_sink(m, analyze_ids(m, ids), 3, 1).after,
    "first_writes": lambda m, ids: writes.first_writes(analyze_ids(m, ids)).mlp_write,  # its writes add up here
}  # fmt: skip


@pytest.mark.parametrize("name", BFLOAT16_RUNS)
def test_a_bfloat16_model_runs_every_experiment_the_float32_one_does(name: str, random_ids: list[int]) -> None:
    found = np.asarray(BFLOAT16_RUNS[name](loaded_tiny("llama", torch.bfloat16), random_ids), dtype=float)
    assert found.size and np.isfinite(found).all()
