"""Captured attention and metrics against Hugging Face's own eager attention."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from sinkscope.core import attention, capture, metrics
from sinkscope.core.arrays import bin_index, pool_max
from sinkscope.core.bundled import DEFAULT_MODEL
from sinkscope.core.capture import analyze, analyze_ids, attention_maps
from sinkscope.core.models import dequantized_dir
from transformers import AutoModelForCausalLM

from tests.tiny import TINY_CONFIGS, build_tiny, tiny_loaded

N_TOKENS = 150  # spans several query chunks of the chunked attention


@pytest.fixture
def long_ids() -> list[int]:
    return np.random.default_rng(2).integers(0, 96, size=N_TOKENS).tolist()


def eager_reference(name: str, ids: list[int]) -> object:
    model = build_tiny(name, "eager")
    with torch.no_grad():
        return model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)


def independent_value_norms(name: str, hidden: torch.Tensor, layer: int) -> np.ndarray:
    """n[h, j] = ||v_j^h W_O^h|| straight from the weights, (head, key_pos)."""
    model = build_tiny(name, "eager")
    config = TINY_CONFIGS[name]
    n_heads = config.num_attention_heads
    with torch.no_grad():
        if name == "gpt2":
            block = model.transformer.h[layer]
            v = block.attn.c_attn(block.ln_1(hidden))[0].split(config.n_embd, dim=-1)[2]  # (token, d_model)
            head_dim = config.n_embd // n_heads
            v = v.reshape(-1, n_heads, head_dim)  # (token, head, head_dim)
            w_out = block.attn.c_proj.weight.reshape(n_heads, head_dim, -1)  # (head, head_dim, d_model)
            out = torch.einsum("thd,hdm->htm", v, w_out)
        else:
            block = model.model.layers[layer]
            head_dim = config.hidden_size // n_heads
            v = block.self_attn.v_proj(block.input_layernorm(hidden))[0]
            v = v.reshape(-1, config.num_key_value_heads, head_dim)  # (token, kv_head, head_dim)
            v = v.repeat_interleave(n_heads // config.num_key_value_heads, dim=1)  # (token, head, head_dim)
            w_out = block.self_attn.o_proj.weight.reshape(-1, n_heads, head_dim)  # (d_model, head, head_dim)
            out = torch.einsum("thd,mhd->htm", v, w_out)
    return out.norm(dim=-1).numpy()


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_captured_maps_equal_hugging_face_eager(name: str, long_ids: list[int]) -> None:
    reference = eager_reference(name, long_ids)
    loaded = tiny_loaded(name)
    for layer, expected in enumerate(reference.attentions):
        maps = attention_maps(loaded, long_ids, layer).weights
        assert maps.shape == expected[0].shape
        assert np.abs(maps - expected[0].numpy()).max() <= 1e-5
        np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
        assert np.triu(maps, k=1).max() == 0.0


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_one_layer_run_from_the_trace_equals_hugging_face_and_the_forward(name: str, long_ids: list[int]) -> None:
    """A layer scrub runs that layer alone from the trace's h^layer (sliding-window mixes run the forward)."""
    reference, loaded = eager_reference(name, long_ids), tiny_loaded(name)
    trace = analyze_ids(loaded, long_ids)
    earlier_blocks_ran = []
    hook = loaded.blocks[0].register_forward_hook(lambda *_: earlier_blocks_ran.append(1))
    for layer, expected in enumerate(reference.attentions):
        alone = attention_maps(loaded, long_ids, layer, start=trace.residual[layer])
        assert np.abs(alone.weights - expected[0].numpy()).max() <= 1e-5
        forward = attention_maps(loaded, long_ids, layer)
        for field in ("weights", "value_norms", "withheld", "output_norms"):
            np.testing.assert_allclose(getattr(alone, field), getattr(forward, field), atol=1e-5, err_msg=field)
    hook.remove()
    assert len(earlier_blocks_ran) == (2 if name == "gemma3-sliding" else 0) + 2  # + the two forwards past block 0


@pytest.mark.parametrize("name", ["llama-gqa", "gpt2"])
def test_value_norms_equal_an_independent_computation(name: str, long_ids: list[int]) -> None:
    reference = eager_reference(name, long_ids)
    loaded = tiny_loaded(name)
    for layer in range(TINY_CONFIGS[name].num_hidden_layers):
        expected = independent_value_norms(name, reference.hidden_states[layer], layer)
        np.testing.assert_allclose(attention_maps(loaded, long_ids, layer).value_norms, expected, rtol=1e-4)


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_chunked_head_metrics_equal_metrics_of_the_full_maps(name: str, long_ids: list[int]) -> None:
    reference = eager_reference(name, long_ids)
    loaded = tiny_loaded(name)
    trace = analyze_ids(loaded, long_ids)
    config = TINY_CONFIGS[name]
    for layer, expected_maps in enumerate(reference.attentions):
        sliding = getattr(config, "layer_types", [None] * 3)[layer] == "sliding_attention"
        norms = attention_maps(loaded, long_ids, layer).value_norms
        window = config.sliding_window if sliding else None
        expected = metrics.head_scores(expected_maps[0].numpy(), norms, window=window)
        for metric in metrics.HEAD_METRICS:
            np.testing.assert_allclose(trace.heads[metric][layer], expected[metric], atol=1e-5, err_msg=metric)
        ratio = metrics.value_norm_ratio(norms)
        np.testing.assert_allclose(trace.heads["value_norm_ratio"][layer], ratio, rtol=1e-5)


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_sink_of_every_prefix_from_one_pass_equals_a_run_on_that_prefix(name: str, long_ids: list[int]) -> None:
    loaded = tiny_loaded(name)
    trace = analyze_ids(loaded, long_ids)
    reference = eager_reference(name, long_ids)
    first_key = np.stack([maps[0, :, :, 0].numpy() for maps in reference.attentions])  # (layer, head, query_pos)
    np.testing.assert_allclose(trace.first_key, first_key, atol=1e-6)
    lengths = [2, 9, 64, 65, 100, N_TOKENS]
    by_length = trace.sink_by_length(lengths)  # (length, layer, head)
    for length, sink in zip(lengths, by_length, strict=True):
        np.testing.assert_allclose(sink, analyze_ids(loaded, long_ids[:length]).heads["sink"], atol=1e-6)
    with pytest.raises(ValueError):
        trace.sink_by_length([N_TOKENS + 1])


@pytest.mark.parametrize("name", ["llama-gqa", "gemma3-sliding"])
def test_residual_stream_is_each_decoder_layers_output_before_the_final_norm(name: str, long_ids: list[int]) -> None:
    reference = eager_reference(name, long_ids)
    trace = analyze_ids(tiny_loaded(name), long_ids)
    n_layers = TINY_CONFIGS[name].num_hidden_layers
    assert trace.residual.shape == (
        n_layers + 1,
        N_TOKENS,
        TINY_CONFIGS[name].hidden_size,
    )
    for layer in range(n_layers):  # Hugging Face's entries 0..L-1 are h^0..h^{L-1}
        np.testing.assert_allclose(trace.residual[layer], reference.hidden_states[layer][0].numpy(), atol=1e-5)
    assert not np.allclose(
        trace.residual[n_layers],
        reference.hidden_states[n_layers][0].numpy(),
        atol=1e-3,
    )


def norm_by_hand(name: str, model: torch.nn.Module, layer: int, h: torch.Tensor) -> torch.Tensor:
    """Layer ``layer``'s input norm written out: RMSNorm (Gemma scales by 1 + w) or GPT-2's LayerNorm."""
    if name == "gpt2":
        ln = model.transformer.h[layer].ln_1
        centred = h - h.mean(-1, keepdim=True)
        return centred / (centred.pow(2).mean(-1, keepdim=True) + ln.eps).sqrt() * ln.weight + ln.bias
    norm = model.model.layers[layer].input_layernorm
    scale = (1 + norm.weight) if name == "gemma3-sliding" else norm.weight
    eps = norm.eps if hasattr(norm, "eps") else norm.variance_epsilon
    return h / (h.pow(2).mean(-1, keepdim=True) + eps).sqrt() * scale


def mean_first_cosine(x: torch.Tensor) -> float:
    """Mean over t >= 1 of cos(x[0], x[t]), for x (token, d_model)."""
    return float(torch.nn.functional.cosine_similarity(x[1:], x[:1], dim=-1).mean())


def randomize_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Fresh norms scale every channel alike, which leaves cosines unchanged: give each channel its own weight."""
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "norm" in name or "ln_" in name:
                weight.copy_(torch.rand(weight.shape, generator=generator) * 2 - 0.5)
    return model


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_bos_cosine_is_measured_on_what_attention_reads(name: str, long_ids: list[int]) -> None:
    """x^l = the next layer's input norm of h^l (by hand); x^L = Hugging Face's last, final-normed state."""
    model = randomize_norms(build_tiny(name, "eager"))
    with torch.no_grad():
        reference = model(torch.tensor([long_ids]), output_hidden_states=True)
    loaded = tiny_loaded(name)
    randomize_norms(loaded.model)
    trace = analyze_ids(loaded, long_ids)
    n_layers = TINY_CONFIGS[name].num_hidden_layers
    with torch.no_grad():
        reads = [norm_by_hand(name, model, layer, reference.hidden_states[layer][0]) for layer in range(n_layers)]
    reads.append(reference.hidden_states[n_layers][0])
    expected = [mean_first_cosine(x) for x in reads]
    np.testing.assert_allclose(trace.layers["bos_cosine"], expected, atol=1e-5)
    raw = [mean_first_cosine(torch.tensor(h)) for h in trace.residual]
    np.testing.assert_allclose(trace.layers["bos_cosine_raw"], raw, atol=1e-5)
    assert not np.allclose(trace.layers["bos_cosine"], trace.layers["bos_cosine_raw"], atol=1e-3)


def test_trace_is_immutable(random_ids: list[int]) -> None:
    trace = analyze_ids(tiny_loaded("llama-gqa"), random_ids)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.model = "other"  # type: ignore[misc]
    with pytest.raises(ValueError):
        trace.heads["sink"][0, 0] = 1.0
    with pytest.raises(ValueError):
        trace.residual[0, 0, 0] = 1.0


def test_trace_tables_have_one_row_per_head_and_layer(random_ids: list[int]) -> None:
    trace = analyze_ids(tiny_loaded("gpt2"), random_ids)
    rows = trace.head_rows()
    assert len(rows) == 3 * 4
    assert rows[5]["layer"] == 1 and rows[5]["head"] == 1
    assert rows[5]["sink"] == pytest.approx(trace.heads["sink"][1, 1])
    assert [row["layer"] for row in trace.layer_rows()] == [0, 1, 2, 3]


def test_one_token_gives_nan_scores_not_an_error() -> None:
    trace = analyze_ids(tiny_loaded("llama-gqa"), [5])
    assert np.isnan(trace.heads["sink"]).all()
    assert (trace.heads["kind"] == "mixed").all()


def test_outside_a_recording_the_attention_function_is_plain_sdpa(
    random_ids: list[int],
) -> None:
    ours = tiny_loaded("llama-gqa").model
    sdpa = build_tiny("llama-gqa", "sdpa")
    ids = torch.tensor([random_ids])
    with torch.no_grad():
        np.testing.assert_allclose(ours(ids).logits.numpy(), sdpa(ids).logits.numpy(), atol=1e-5)


def test_bundled_model_maps_equal_hugging_face_eager(smollm2: object) -> None:
    text = "The first token of a text soaks up attention that has nowhere else to go."
    trace = analyze(smollm2, text)
    eager = AutoModelForCausalLM.from_pretrained(dequantized_dir(DEFAULT_MODEL), attn_implementation="eager").eval()
    with torch.no_grad():
        reference = eager(torch.tensor([trace.token_ids]), output_attentions=True)
    for layer in (0, 5, 29):
        maps = attention_maps(smollm2, trace.token_ids, layer).weights
        assert np.abs(maps - reference.attentions[layer][0].numpy()).max() <= 1e-5
        expected = metrics.head_scores(reference.attentions[layer][0].numpy())
        np.testing.assert_allclose(trace.heads["sink"][layer], expected["sink"], atol=1e-5)
    assert trace.sink_rate(0.3) > 50  # SmolLM2 is a strong-sink model


def test_register_is_idempotent() -> None:
    attention.register()
    attention.register()
    from transformers import AttentionInterface

    assert AttentionInterface._global_mapping[attention.ATTENTION_NAME] is attention.sinkscope_attention


def test_thumbnails_are_max_pooled_maps(long_ids: list[int]) -> None:
    loaded = tiny_loaded("gemma3-sliding")
    thumbs = capture.thumbnails(loaded, long_ids, size=16)
    assert thumbs.shape == (3, 4, 16, 16)
    for layer in range(3):
        maps = attention_maps(loaded, long_ids, layer).weights
        bins = bin_index(N_TOKENS, 16)  # the figures' bins: the chunked pooling must use the same ones
        for r in range(16):
            for c in range(16):
                block = maps[:, bins == r][:, :, bins == c]
                np.testing.assert_allclose(thumbs[layer, :, r, c], block.max(axis=(1, 2)), atol=1e-6)
        for head in range(4):
            np.testing.assert_allclose(thumbs[layer, head], pool_max(maps[head], 16)[0], atol=1e-6)


def test_concurrent_analyses_on_one_shared_model_do_not_mix() -> None:
    loaded = tiny_loaded("llama-gqa")
    rng = np.random.default_rng(5)
    texts = [rng.integers(0, 96, size=n).tolist() for n in (40, 300, 90, 200)]
    expected = [analyze_ids(loaded, ids) for ids in texts]
    barrier = threading.Barrier(len(texts))

    def run(ids: list[int]) -> capture.Trace:
        barrier.wait()
        return analyze_ids(loaded, ids)

    for _ in range(3):
        with ThreadPoolExecutor(len(texts)) as pool:
            results = list(pool.map(run, texts))
        for got, want in zip(results, expected, strict=True):
            assert got.token_ids == want.token_ids
            np.testing.assert_allclose(got.residual, want.residual, atol=1e-5)
            np.testing.assert_allclose(got.heads["sink"], want.heads["sink"], atol=1e-6)


def test_a_layer_scrub_on_a_model_without_hooks_yet_runs_that_layer_alone(long_ids: list[int]) -> None:
    """A model loaded again (the app's model cache evicted the first) meets traces made before: the one-layer
    recompute installs what it needs."""
    trace = analyze_ids(tiny_loaded("llama-gqa"), long_ids)
    fresh = tiny_loaded("llama-gqa")  # the same weights, no hooks installed
    alone = attention_maps(fresh, long_ids, 2, start=trace.residual[2])
    np.testing.assert_allclose(alone.weights, attention_maps(fresh, long_ids, 2).weights, atol=1e-5)
