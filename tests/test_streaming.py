"""StreamingLLM's cache and streaming perplexity."""

from __future__ import annotations

from pydoc_data.topics import topics

import numpy as np
import pytest
import torch
from sinkscope.core import attention, loss, texts
from sinkscope.core.errors import InputError, ModelLoadError
from sinkscope.core.i18n import catalogue
from sinkscope.core.models import LoadedModel, model_info
from sinkscope.experiments import stream_plan, streaming
from sinkscope.findings.words import A_LOT
from sinkscope.plot.explore_figures import rolling_mean
from transformers import AutoModelForCausalLM, MistralConfig
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, eager_attention_forward

from tests.tiny import tiny_loaded

MISTRAL_SIZES = dict(
    vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512,
)  # fmt: skip


def streaming_llm_by_the_book(
    loaded: LoadedModel, ids: list[int], sinks: int, window: int, sliding: int | None = None
) -> np.ndarray:
    """StreamingLLM as the paper writes it, for reference: keep every key before its rotation, re-rotate the
    whole cache to positions 0 .. size-1 at every step and attend with Hugging Face's own eager attention; a
    ``sliding`` window (every layer's, as Mistral's) leaves each query the newest ``sliding`` entries of the cache."""
    model, kept = loaded.model, []
    stored: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # layer -> (pre-rotation key, value) each

    def attend(module, query, key, value, mask, scaling=None, softcap=None, s_aux=None):  # noqa: ANN001, ANN202
        cos, sin = model.model.rotary_emb(value, torch.arange(len(kept))[None])  # (1, size, head_dim)
        _, unrotated = apply_rotary_pos_emb(key, key, cos[:, -1:], -sin[:, -1:])  # undo R(size - 1)
        entries = stored.setdefault(module.layer_idx, [])
        entries.append((unrotated, value))
        _, keys = apply_rotary_pos_emb(key, torch.cat([k for k, _ in entries], dim=2), cos, sin)
        values = torch.cat([v for _, v in entries], dim=2)
        if sliding is not None:
            keys, values = keys[:, :, -sliding:], values[:, :, -sliding:]  # (1, kv_head, entries, head_dim)
        return eager_attention_forward(module, query, keys, values, None, scaling=scaling, dropout=0.0)

    nll = []
    with attention.overriding(attend), torch.inference_mode():
        for t in range(len(ids) - 1):
            if len(kept) == sinks + window:
                del kept[sinks]
                for entries in stored.values():
                    del entries[sinks]
            kept.append(t)
            position = torch.tensor([[len(kept) - 1]])
            logits = model(input_ids=torch.tensor([[ids[t]]]), position_ids=position, use_cache=False).logits
            nll.append(-torch.log_softmax(logits[0, -1], dim=-1)[ids[t + 1]].item())
    return np.array(nll)


def test_the_cache_keeps_the_sinks_and_the_most_recent_tokens() -> None:
    cache = streaming.SinkCache(sinks=(2,), capacity=5)
    slots = [cache.admit() for _ in range(10)]
    assert cache.kept == [[0, 1, 7, 8, 9]]
    assert slots == [[0], [1], [2], [3], [4], [2], [3], [4], [2], [3]]  # each new token over the oldest non-sink


def test_without_sinks_only_recent_tokens_stay() -> None:
    cache = streaming.SinkCache(sinks=(0,), capacity=4)
    for _ in range(9):
        cache.admit()
    assert cache.kept == [[5, 6, 7, 8]]


def test_a_cache_must_hold_the_current_token() -> None:
    with pytest.raises(InputError):
        streaming.SinkCache(sinks=(4,), capacity=4)


@pytest.mark.parametrize(("sinks", "window"), [(3, 5), (1, 4), (0, 6)])
def test_the_ring_cache_scores_as_streaming_llm_by_the_book(random_ids: list[int], sinks: int, window: int) -> None:
    loaded = tiny_loaded("llama-gqa")
    streamed, _ = streaming.stream(loaded, random_ids, sinks, window)
    np.testing.assert_allclose(streamed, streaming_llm_by_the_book(loaded, random_ids, sinks, window), atol=1e-5)


@pytest.mark.parametrize(("sinks", "window", "sliding"), [(3, 5, 5), (2, 6, 7), (1, 4, 9)])
def test_a_sliding_layer_sees_the_newest_entries_of_the_cache_by_the_book(
    random_ids: list[int], sinks: int, window: int, sliding: int
) -> None:
    """Mistral's window in a StreamingLLM cache: the last ``sliding`` cache entries (without the sinks once the
    window is smaller than the recent part, with some of them once it is larger)."""
    attention.register()
    torch.manual_seed(0)
    config = MistralConfig(**MISTRAL_SIZES, sliding_window=sliding)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention.ATTENTION_NAME).eval()
    loaded = LoadedModel(model, None, model_info(model, "mistral", "mistral"))
    streamed, _ = streaming.stream(loaded, random_ids, sinks, window)
    expected = streaming_llm_by_the_book(loaded, random_ids, sinks, window, sliding)
    np.testing.assert_allclose(streamed, expected, atol=1e-5)


def test_the_stored_keys_never_exceed_sinks_plus_window(random_ids: list[int]) -> None:
    nll, cache = streaming.stream(tiny_loaded("llama-gqa"), random_ids, sinks=3, window=5)
    assert len(nll) == len(random_ids) - 1
    assert all(keys.shape[2] == 8 for keys in cache.keys.values())  # (lane, kv_head, size, head_dim)
    assert cache.kept == [[0, 1, 2, *range(len(random_ids) - 6, len(random_ids) - 1)]]


def test_a_cache_that_never_evicts_equals_the_dense_pass(random_ids: list[int]) -> None:
    loaded = tiny_loaded("llama-gqa")
    nll, _ = streaming.stream(loaded, random_ids, sinks=4, window=len(random_ids))
    np.testing.assert_allclose(nll, streaming.dense(loaded, random_ids), atol=1e-4)


def test_the_window_stream_equals_its_mask_emulation_on_a_rope_model(random_ids: list[int]) -> None:
    loaded = tiny_loaded("llama-gqa")
    streamed = streaming.streaming_nll(loaded, random_ids, "window", sinks=2, window=6)
    emulated = streaming.streaming_nll(loaded, random_ids, "mask-window", sinks=2, window=6)
    np.testing.assert_allclose(streamed, emulated, atol=1e-4)


def test_recompute_re_encodes_the_last_tokens_for_every_prediction(random_ids: list[int]) -> None:
    loaded = tiny_loaded("gemma3-sliding")  # recompute needs no rotary re-assignment: any model works
    recomputed = streaming.streaming_nll(loaded, random_ids, "recompute", sinks=2, window=6)
    assert len(recomputed) == len(random_ids) - 1
    np.testing.assert_allclose(recomputed[:7], streaming.dense(loaded, random_ids[:8]), atol=1e-5)
    for target in (8, 20, len(random_ids) - 1):
        alone = streaming.dense(loaded, random_ids[target - 8 : target + 1])[-1]
        assert recomputed[target - 1] == pytest.approx(alone, abs=1e-5)


def test_models_without_standard_rope_are_refused(random_ids: list[int]) -> None:
    with pytest.raises(ModelLoadError, match="rotary"):
        streaming.stream(tiny_loaded("gpt2"), random_ids, sinks=4, window=8)


def test_lanes_side_by_side_equal_each_cache_streamed_alone(random_ids: list[int]) -> None:
    """One batch of caches (the window, and S sinks + the rest) gives each lane exactly its own stream."""
    loaded = tiny_loaded("llama-gqa")
    together, cache = streaming.stream_lanes(loaded, random_ids, (0, 1, 3), 8)
    for lane, sinks in enumerate((0, 1, 3)):
        alone, _ = streaming.stream(loaded, random_ids, sinks, 8 - sinks)
        np.testing.assert_allclose(together[lane], alone, atol=1e-5)
        assert cache.kept[lane][:sinks] == list(range(sinks)) and len(cache.kept[lane]) == 8
    methods = streaming.stream_methods(loaded, random_ids, ("window", "sinks"), 3, 5)
    np.testing.assert_allclose(methods["sinks"], together[2], atol=1e-5)
    np.testing.assert_allclose(
        methods["window"], streaming.streaming_nll(loaded, random_ids, "window", 3, 5), atol=1e-5
    )


def test_generation_lanes_continue_each_with_its_own_cache(random_ids: list[int]) -> None:
    loaded = tiny_loaded("llama-gqa")
    prompt = random_ids[:20]
    both = streaming.generate_lanes(loaded, prompt, 6, (2, 0), 8)
    assert both == [streaming.generate(loaded, prompt, 6, 2, 6), streaming.generate(loaded, prompt, 6, 0, 8)]


def test_steps_run_on_one_thread_and_leave_the_thread_count_as_it_was(random_ids: list[int]) -> None:
    loaded, during = tiny_loaded("llama-gqa"), []
    hook = loaded.model.lm_head.register_forward_hook(lambda *_: during.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        streaming.stream(loaded, random_ids[:10], 2, 4)
        assert set(during) == {1} and torch.get_num_threads() == 2
    finally:
        hook.remove()
        torch.set_num_threads(before)


def test_a_stop_request_keeps_the_partial_result(random_ids: list[int]) -> None:
    nll, _ = streaming.stream(tiny_loaded("llama-gqa"), random_ids, 2, 6, progress=lambda done, total: len(done) < 10)
    assert len(nll) == 10


def test_on_the_bundled_model_sinks_rescue_the_window(smollm2: LoadedModel) -> None:
    ids = smollm2.tokenizer("\n".join(topics.values()), add_special_tokens=False)["input_ids"][:120]
    ppl = {m: loss.perplexity(streaming.streaming_nll(smollm2, ids, m, sinks=4, window=28)) for m in streaming.METHODS}
    assert abs(ppl["window"] / ppl["mask-window"] - 1) < 0.01  # the same computation for RoPE models
    assert ppl["sinks"] < 0.8 * ppl["window"]  # evicting the first tokens hurts; keeping 4 of them helps
    assert abs(ppl["sinks"] / ppl["recompute"] - 1) < 0.15


def test_generation_with_a_bounded_cache_continues_the_prompt(smollm2: LoadedModel) -> None:
    prompt = smollm2.tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
    with_room = streaming.generate(smollm2, prompt, 3, sinks=4, window=60)
    assert smollm2.tokenizer.decode(with_room).strip().startswith("Paris")
    assert len(streaming.generate(smollm2, prompt, 20, sinks=0, window=4)) == 20
    stopped = streaming.generate(smollm2, prompt, 20, sinks=4, window=60, progress=lambda done, total: len(done) < 3)
    assert stopped == streaming.generate(smollm2, prompt, 3, sinks=4, window=60)  # a Stop keeps what was made


def test_on_the_bundled_model_the_window_loss_jumps_per_token_and_the_rolling_curve_spreads_it(
    smollm2: LoadedModel,
) -> None:
    """T13: the intro said "the loss shoots up the moment eviction starts" while the page's curve does not jump at
    the cache-full line. Both hold: per token the window's loss jumps at once, and the page draws a rolling mean,
    which spreads the jump over the next tokens; the intro now says which is which."""
    setup = stream_plan.CHECK
    ids = smollm2.tokenizer(texts.builtin_text(), add_special_tokens=False)["input_ids"][: setup.tokens]
    excess = (streaming.streaming_nll(smollm2, ids, "mask-window", setup.sinks, setup.window)
              - streaming.streaming_nll(smollm2, ids, "dense", setup.sinks, setup.window))  # fmt: skip
    full = setup.cache_size  # the first prediction whose query no longer sees the first token
    np.testing.assert_allclose(excess[:full], 0, atol=1e-4)  # the same keys until the cache is full
    assert excess[full : full + 8].mean() > A_LOT  # per token, at once
    rolling = rolling_mean(excess, max(8, setup.window // 2))  # as the page draws it
    assert rolling[full] < rolling[full + setup.window // 2] / 2  # the curve rises over the next tokens
    assert "per token" in catalogue("en")["stream.intro"] and "rolling" in catalogue("en")["stream.intro"]
