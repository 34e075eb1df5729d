"""The family matrix: every decoder family a sink researcher would pick, measured exactly or refused clearly.

Each row is a tiny random model built from the family's own config class (seconds, no download), compared with
transformers' own eager attention. Adding a family: one file in ``sinkscope/families`` and one row here.
"""

from __future__ import annotations

import copy
import math
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import transformers
from sinkscope.core import attention, chunked, families, metrics, slow
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import analyze_ids, attention_maps, thumbnails
from sinkscope.core.errors import ModelLoadError, reason_of
from sinkscope.core.models import (
    LoadedModel,
    check_capture,
    implementation_for,
    load_model,
    model_info,
    token_limit,
    with_sinkscope_attention,
)  # fmt: skip
from sinkscope.experiments import interventions, kv_evict, kv_quant, streaming, writes
from transformers import CONFIG_MAPPING, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from tests.tiny import MATRIX, N_TOKENS, SIZES, SLOW, build, eager_run, loaded_tiny, slow_loaded, word_tokenizer

FOUND = (
    "mixtral", "qwen2_moe", "olmoe", "cohere", "cohere2", "stablelm", "starcoder2", "glm4", "granitemoe", "helium",
    "internlm3", "exaone4", "seed_oss", "arcee", "llama4_text", "hunyuan_v1_dense",
)  # fmt: skip
REFUSED = {  # a config, and the name its refusal gives (a record's, or the model's own)
    "qwen3_next": (transformers.Qwen3NextConfig(
        **SIZES | {"num_hidden_layers": 2}, head_dim=16, num_experts=4, num_experts_per_tok=2,
        layer_types=["linear_attention", "full_attention"],
    ), "Qwen3Next changes its heads' output"),  # a hybrid whose attention closes a gate on each head's output
    "mamba": (transformers.MambaConfig(vocab_size=96, hidden_size=64, num_hidden_layers=2), "Mamba"),  # no attention
    "rwkv": (transformers.RwkvConfig(vocab_size=96, hidden_size=64, num_hidden_layers=2), "RWKV"),  # a recurrence
    "diffllama": (transformers.DiffLlamaConfig(**SIZES, head_dim=16), "DiffLlama changes its heads' output"),
}  # fmt: skip
STREAMS = {
    "llama", "qwen2", "qwen3", "gemma", "gpt_neox", "olmo2", "phi3", "smollm3", "granite", "gpt_oss-full", "phi",
    "apertus", "mistral", "gemma2", "gemma3", "gpt_oss", "olmo3",  # the last five with sliding-window layers
}  # fmt: skip


@pytest.fixture(scope="module")
def ids() -> list[int]:
    return np.random.default_rng(3).integers(3, 96, size=N_TOKENS).tolist()


def mean_first_cosine(x: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(x[1:], x[:1], dim=-1).mean())


@pytest.mark.parametrize("name", list(MATRIX))
def test_head_metrics_equal_eager_attention(name: str, ids: list[int]) -> None:
    """Per-head metrics (learned_sink included) equal those of transformers' eager maps to 1e-5."""
    reference, _ = eager_run(name, ids)
    loaded = loaded_tiny(name)
    trace = analyze_ids(loaded, ids)
    config = MATRIX[name]
    sliding = families.family_of(config).sliding_layers(config)
    for layer, expected_maps in enumerate(reference.attentions):
        maps = attention_maps(loaded, ids, layer)
        assert np.abs(maps.weights - expected_maps[0].numpy()).max() <= 1e-5
        window = getattr(config, "sliding_window", None) if sliding[layer] else None
        expected = metrics.head_scores(expected_maps[0].numpy(), maps.value_norms, window=window)
        for metric in metrics.HEAD_METRICS:
            np.testing.assert_allclose(trace.heads[metric][layer], expected[metric], atol=1e-5, err_msg=metric)
        np.testing.assert_allclose(maps.weights.sum(-1) + maps.learned, 1.0, atol=1e-5)


def test_gpt_oss_rows_sum_to_less_than_one_and_the_rest_is_the_learned_sink(ids: list[int]) -> None:
    reference, _ = eager_run("gpt_oss", ids)
    trace = analyze_ids(loaded_tiny("gpt_oss"), ids)
    for layer, expected_maps in enumerate(reference.attentions):
        row_sums = expected_maps[0, :, 1:].sum(-1).numpy()  # (head, query in Q)
        assert row_sums.max() < 0.999 and row_sums.min() < 0.5  # every row gives the learned sink some mass
        np.testing.assert_allclose(trace.heads["learned_sink"][layer], 1 - row_sums.mean(-1), atol=1e-5)
        np.testing.assert_allclose(trace.heads["sink"][layer], expected_maps[0, :, 1:, 0].mean(-1), atol=1e-5)
    assert np.all(analyze_ids(loaded_tiny("llama"), ids).heads["learned_sink"] == 0)


@pytest.mark.parametrize("name", list(MATRIX))
def test_layer_metrics_read_what_each_familys_attention_reads(name: str, ids: list[int]) -> None:
    """bos_cosine on x^l, the input each attention module was given (a post-norm family's is h^l itself);
    for h^L, transformers' last hidden state (the final norm)."""
    reference, reads = eager_run(name, ids)
    trace = analyze_ids(loaded_tiny(name), ids)
    expected = [mean_first_cosine(x) for x in [*reads, reference.hidden_states[-1][0]]]
    np.testing.assert_allclose(trace.layers["bos_cosine"], expected, atol=1e-5)


@pytest.mark.parametrize("name", list(MATRIX))
def test_a_layer_scrub_equals_the_full_pass(name: str, ids: list[int]) -> None:
    loaded = loaded_tiny(name)
    trace = analyze_ids(loaded, ids)
    for layer in range(MATRIX[name].num_hidden_layers):
        alone = attention_maps(loaded, ids, layer, start=trace.residual[layer])
        forward = attention_maps(loaded, ids, layer)
        for field in ("weights", "value_norms", "withheld", "output_norms", "learned"):
            np.testing.assert_allclose(getattr(alone, field), getattr(forward, field), atol=1e-5, err_msg=field)


@pytest.mark.parametrize("name", list(MATRIX))
def test_streaming_equals_its_masked_forward_or_is_refused(name: str, ids: list[int]) -> None:
    loaded = loaded_tiny(name)
    if name not in STREAMS:
        with pytest.raises(ModelLoadError):
            streaming.stream(loaded, ids, sinks=2, window=6)
        return
    streamed = streaming.streaming_nll(loaded, ids, "window", sinks=2, window=6)  # a sliding window of 7 sees 7
    np.testing.assert_allclose(streamed, streaming.streaming_nll(loaded, ids, "mask-window", 2, 6), atol=1e-4)  # of 8
    never_evicts, _ = streaming.stream(loaded, ids, sinks=2, window=len(ids))
    np.testing.assert_allclose(never_evicts, streaming.dense(loaded, ids), atol=1e-4)


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_turning_a_query_back_equals_the_familys_own_rotation_at_the_earlier_position(name: str) -> None:
    """What streaming does for the sinks: R(-d) of a query rotated at t is the family's own rotation at t - d
    (partial rotary, YaRN's scaled cos and sin and gpt-oss's half-split rotation included)."""
    model = build(name, "eager")
    own = sys.modules[type(model).__module__].apply_rotary_pos_emb  # the family's modeling file's function
    head_dim = MATRIX[name].hidden_size // MATRIX[name].num_attention_heads
    query = torch.randn(1, 4, 1, getattr(MATRIX[name], "head_dim", None) or head_dim)  # (1, head, 1, head_dim)

    rope, kind = model.base_model.rotary_emb, (getattr(MATRIX[name], "layer_types", None) or [None])[0]
    per_kind = (kind,) if hasattr(rope, f"{kind}_inv_freq") else ()  # Gemma-3: each layer type its own frequencies

    def at(position: int) -> torch.Tensor:
        cos, sin = rope(query, torch.tensor([[position]]), *per_kind)
        turned = cos.shape[-1] if name == "phi" else query.shape[-1]  # Phi's attention splits them off itself
        return torch.cat([own(query[..., :turned], query[..., :turned], cos, sin)[0], query[..., turned:]], dim=-1)

    rotary = streaming.rotary_of(loaded_tiny(name))  # the same config: the same rotary frequencies
    torch.testing.assert_close(rotary.turn_back(at(30), 17), at(13), atol=1e-5, rtol=1e-5)
    assert rotary.rope_layers == ((True, True, False) if name == "smollm3" else (True,) * 3)


@pytest.mark.parametrize("name", list(MATRIX))
def test_interventions_change_what_they_say(name: str, ids: list[int]) -> None:
    loaded = loaded_tiny(name)
    with interventions.intervene(loaded, interventions.DropFirst(1, layers=(1,))):
        dropped = analyze_ids(loaded, ids)
    assert np.all(dropped.heads["sink"][1] == 0)
    intact = analyze_ids(loaded, ids)
    np.testing.assert_allclose(dropped.heads["sink"][0], intact.heads["sink"][0], atol=1e-6)
    assert interventions.embedding_scale(loaded, ids) == pytest.approx(
        np.median(np.linalg.norm(intact.residual[0], axis=-1))
    )


@pytest.mark.parametrize("name", list(MATRIX))
def test_a_familys_declared_features_are_what_its_model_passes_to_attention(name: str, ids: list[int]) -> None:
    """The adapter's softcap and learned-sink flags equal what transformers hands the attention function, and a
    config with sliding-window layers belongs to a family that declares them."""
    passed: list[tuple[bool, bool]] = []  # per attention call: (softcap given, s_aux given)

    def attend(module, query, key, value, mask, scaling=None, softcap=None, s_aux=None):  # noqa: ANN001, ANN202
        passed.append((softcap is not None, s_aux is not None))
        return chunked.eager(query, key, value, mask, scaling, softcap, s_aux)

    loaded = loaded_tiny(name)
    with attention.overriding(attend), torch.inference_mode():
        loaded.model(input_ids=torch.tensor([ids[:8]]), use_cache=False)
    family = families.family_of(MATRIX[name])
    assert len(passed) == MATRIX[name].num_hidden_layers
    assert family.softcap == any(softcap for softcap, _ in passed)
    assert family.learned_sinks == any(sinks for _, sinks in passed)
    assert family.sliding_windows or not any(family.sliding_layers(MATRIX[name]))


def test_every_family_in_the_matrix_has_its_adapter_or_is_found() -> None:
    declared = {families.family_of(config).name for name, config in MATRIX.items() if name not in FOUND}
    declared |= {families.family_of(config).name for config in SLOW.values()}
    assert declared == {family.name for family in families.FAMILIES}
    assert all(families.family_of(MATRIX[name]).tested for name in MATRIX if name not in FOUND)
    for name in FOUND:
        info = loaded_tiny(name).info
        assert info.family_found and "structure found, not declared" in info.badge()


@pytest.mark.parametrize("name", list(MATRIX))
def test_the_output_projection_is_the_map_that_reads_what_attention_wrote(name: str, ids: list[int]) -> None:
    """The value metrics weigh each head by W_O^h: the projection the record names (or the probe found) must be the
    one whose input is the attention's output, (token, head * head_dim), in every layer."""
    loaded = loaded_tiny(name)
    family, written, read = families.family_of(loaded.model.config), [], []

    def attend(module, query, key, value, mask, scaling=None, softcap=None, s_aux=None):  # noqa: ANN001, ANN202
        out, _ = chunked.eager(query, key, value, mask, scaling, softcap, s_aux)  # (1, token, head, head_dim)
        written.append(out.reshape(out.shape[1], -1))  # (token, head * head_dim)
        return out, None

    projections = [family.attention_of(block).get_submodule(family.output_projection) for block in
                   family.decoder_blocks(loaded.model)]  # fmt: skip
    hooks = [p.register_forward_pre_hook(lambda _, args: read.append(args[0][0])) for p in projections]
    with attention.overriding(attend), torch.inference_mode():
        loaded.model(input_ids=torch.tensor([ids]), use_cache=False)
    for hook in hooks:
        hook.remove()
    assert len(read) == len(written) == MATRIX[name].num_hidden_layers
    for wrote, projected in zip(written, read, strict=True):
        torch.testing.assert_close(projected.reshape(wrote.shape), wrote)


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_families_get_one_line_naming_the_family(name: str, tmp_path: object) -> None:
    config, named = REFUSED[name]
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(copy.deepcopy(config)).save_pretrained(tmp_path)
    word_tokenizer().save_pretrained(tmp_path)  # a whole model folder: only the family is wrong with it
    with pytest.raises(ModelLoadError) as refused:
        load_model(str(tmp_path), device="cpu")
    assert named in str(refused.value)
    cli = subprocess.run(
        [sys.executable, "-m", "sinkscope", "analyze", "--model", str(tmp_path), "--text", "hello"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert cli.returncode == 2
    *progress, said = cli.stderr.strip().splitlines()  # "Loading ... on cpu…" where the refusal needs the weights
    assert said.startswith("error: ") and named in said and len(progress) <= 1 and "Traceback" not in cli.stderr


def test_an_attention_argument_the_kernel_does_not_implement_is_refused(ids: list[int]) -> None:
    """transformers hands the model's extra keyword arguments down to attention: one dropped would go unseen."""
    loaded = loaded_tiny("llama")
    inputs = torch.tensor([ids])
    with torch.inference_mode(), attention.recording(loaded.recorder()):
        with pytest.raises(ModelLoadError, match="position_bias"):
            loaded.model(input_ids=inputs, position_bias=torch.zeros(1))
    with torch.inference_mode(), pytest.raises(ModelLoadError, match="is_causal"):
        loaded.model(input_ids=inputs, is_causal=False)  # refused on the SDPA path too


def test_a_model_whose_attention_skips_sinkscope_is_refused_at_load() -> None:
    """A model whose layers call another attention function: the load check sees that no layer arrived."""
    model = build("llama", attention.ATTENTION_NAME)
    model.config._attn_implementation = "eager"
    with pytest.raises(ModelLoadError, match=r"layers \[0, 1, 2\].*Llama"):
        check_capture(model)


TINY = SIZES | {"head_dim": 16}  # every config class reads the names it has (its attribute_map maps the others)
BUILD_SECONDS = 15  # a type transformers cannot build and run tiny in this long is no row of the walk
LARGEST = 100_000_000  # parameters: a default this large (hundreds of experts) is not the tiny model asked for


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Raise TimeoutError in the block after ``seconds`` (pytest runs tests in the main thread)."""

    def expire(*_: object) -> None:
        raise TimeoutError(f"longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def built_tiny(model_type: str, ids: list[int]) -> tuple[object, object]:
    """(the tiny config, transformers' eager output on ``ids``), or a skip saying why transformers cannot."""
    try:
        with within(BUILD_SECONDS):
            config = CONFIG_MAPPING[model_type](**TINY)
            with torch.device("meta"):  # counted before any memory is taken: Llama-4's vision tower is 23 GB
                shape = AutoModelForCausalLM.from_config(copy.deepcopy(config))
            if sum(p.numel() for p in shape.parameters()) > LARGEST:
                raise MemoryError("its defaults are not tiny")
            torch.manual_seed(0)
            eager = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="eager").eval()
            with torch.no_grad():
                return config, eager(torch.tensor([ids]), output_attentions=True, use_cache=False)
    except Exception as err:  # noqa: BLE001 - whatever transformers raises, this type is no row of the walk
        pytest.skip(f"transformers does not build {model_type} tiny from {sorted(TINY)}: {reason_of(err)}")


def rows_normalized(maps: np.ndarray) -> np.ndarray:
    """Each row over its real keys: transformers' eager returns some learned-sink rows (GraniteSWA's) before the
    sink takes its share, others (gpt-oss's) after; Sinkscope's rows are after (metrics.md)."""
    return maps / np.maximum(maps.sum(-1, keepdims=True), 1e-30)


@pytest.mark.parametrize("model_type", sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))
def test_every_causal_lm_transformers_ships_is_measured_exactly_or_refused_in_one_sentence(
    model_type: str, ids: list[int]
) -> None:
    """The walk of issue 37: every ``*ForCausalLM`` whose tiny config builds gives exact maps and the model's own
    logits, or a ModelLoadError (one sentence, a reason of its own); never another exception."""
    config, expected = built_tiny(model_type, ids[:24])
    attention.register()
    try:
        families.check_supported(config)
        torch.manual_seed(0)
        model = with_sinkscope_attention(
            lambda: AutoModelForCausalLM.from_config(
                copy.deepcopy(config), attn_implementation=implementation_for(config)
            ),
            model_type,
        )
        check_capture(model.eval())
        loaded = LoadedModel(model, None, model_info(model, model_type, model_type))
    except ModelLoadError as refused:
        assert "\n" not in str(refused) and str(refused).endswith("."), str(refused)
        return
    trace = analyze_ids(loaded, ids[:24])
    given = [maps for maps in expected.attentions if maps is not None]  # a hybrid's: its attention layers' alone,
    if len(given) == trace.shape[0]:  # or every layer's (MiniMax's linear layers return weights of their own)
        given = [given[layer] for layer in trace.attention_layers]
    for layer, eager_maps in zip(trace.attention_layers, given, strict=True):
        maps = attention_maps(loaded, ids[:24], layer).weights
        expected_maps = rows_normalized(eager_maps[0].float().numpy())
        np.testing.assert_allclose(rows_normalized(maps), expected_maps, atol=5e-5)  # Gemma-4's scale of 1: 1.5e-5
    with torch.no_grad(), attention.recording(loaded.recorder()):  # the chunked kernel, not SDPA
        logits = model(torch.tensor([ids[:24]]), use_cache=False).logits
    torch.testing.assert_close(logits, expected.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", list(SLOW))
def test_the_slow_path_measures_every_metric_from_the_familys_own_eager_weights(name: str, ids: list[int]) -> None:
    """Maps and every per-head metric equal those of transformers' eager weights; the head outputs the value
    metrics are built from equal what the family's output projection really reads (hooked, not looked up)."""
    loaded = slow_loaded(name)
    family, read = loaded.family, []
    hooks = [family.attention_of(block).get_submodule(family.output_projection).register_forward_pre_hook(
        lambda _, args: read.append(args[0][0])) for block in loaded.blocks]  # fmt: skip
    with torch.inference_mode():
        reference = loaded.model(torch.tensor([ids]), output_attentions=True, use_cache=False)
    for hook in hooks:
        hook.remove()
    trace = analyze_ids(loaded, ids)
    windows = [family.sliding_window(SLOW[name]) if sliding else None for sliding in family.sliding_layers(SLOW[name])]
    for layer, expected_maps in enumerate(reference.attentions):
        maps = attention_maps(loaded, ids, layer)
        np.testing.assert_allclose(maps.weights, expected_maps[0].numpy(), atol=1e-6)
        expected = metrics.head_scores(expected_maps[0].numpy(), maps.value_norms, window=windows[layer])
        for metric in metrics.HEAD_METRICS:
            np.testing.assert_allclose(trace.heads[metric][layer], expected[metric], atol=1e-5, err_msg=metric)
        heads_out = read[layer].reshape(len(ids), loaded.info.n_heads, -1).transpose(0, 1)  # (head, token, head_dim)
        w_o = family.output_weight(family.attention_of(loaded.blocks[layer])).float()
        w_o = w_o.reshape(w_o.shape[0], loaded.info.n_heads, -1).permute(1, 2, 0)  # (head, head_dim, d_model)
        written = torch.linalg.norm(heads_out @ w_o, dim=-1)[:, 1:].mean(-1)  # (head,): over Q
        np.testing.assert_allclose(trace.heads["output_norm"][layer], written.numpy(), rtol=1e-4)
    assert np.isnan(trace.heads["withheld"]).all()  # softmax+1 needs the scores the family keeps to itself
    assert loaded.info.slow_path and "slow path" in loaded.info.badge()
    assert thumbnails(loaded, ids, size=8).shape == (3, 4, 8, 8)


@pytest.mark.parametrize("name", list(SLOW))
def test_the_slow_path_refuses_interventions_and_streaming_and_holds_what_fits(name: str, ids: list[int]) -> None:
    loaded = slow_loaded(name)
    with pytest.raises(ModelLoadError, match="slow path"):
        with interventions.intervene(loaded, interventions.DropFirst(1, layers=(1,))):
            pass
    with pytest.raises(ModelLoadError, match="Streaming"):
        streaming.stream(loaded, ids, sinks=2, window=6)
    fits = math.isqrt(slow.MAP_BYTES // (4 * 3 * 4))  # three layers of four heads of float32 (T x T) maps
    assert loaded.info.max_tokens == min(fits, token_limit(SLOW[name]))


def attempts(loaded: LoadedModel, ids: list[int]) -> dict[Can, Callable[[], object]]:
    """What each capability's experiment does first with the model: each must refuse as the handle says."""
    kept = torch.zeros(len(ids), dtype=torch.bool)
    return {
        Can.INTERVENE: lambda: interventions.intervene(loaded, interventions.DropFirst(1, layers=(1,))).__enter__(),
        Can.STREAM: lambda: streaming.stream(loaded, ids, sinks=2, window=6),
        Can.QUANTIZE_KV: lambda: kv_quant.quantized_nll(loaded, ids, 2, kept),
        Can.EVICT_KV: lambda: kv_evict.evict(loaded, ids, 8),
        Can.READ_WRITES: lambda: writes.check_writes(loaded, 0),
    }


@pytest.mark.parametrize("name", [*MATRIX, *SLOW])
def test_the_model_handle_answers_what_it_can_do_and_each_experiment_refuses_in_its_words(
    name: str, ids: list[int]
) -> None:
    loaded = slow_loaded(name) if name in SLOW else loaded_tiny(name)
    answers = {capability: loaded.refusal(capability) for capability in Can}
    for capability, attempt in attempts(loaded, ids).items():
        refused = answers[capability]
        if refused is None:
            continue
        with pytest.raises(ModelLoadError) as raised:
            attempt()
        assert raised.value.message == refused.message, capability
    assert (answers[Can.STREAM] is None) == (name in STREAMS)
    if name in SLOW:  # its attention runs in the family's own code: nothing that edits or reads it inside
        assert all(answer is not None for answer in answers.values())
