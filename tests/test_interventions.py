"""Interventions, withheld mass, output norms and key geometry, against Hugging Face's own eager attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sinkscope.core import chunked, metrics
from sinkscope.core.capture import analyze_ids, attention_maps
from sinkscope.core.errors import InputError
from sinkscope.experiments import interventions
from sinkscope.experiments.geometry import key_geometry
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask
from transformers.models.llama.modeling_llama import eager_attention_forward

from tests.tiny import build_tiny, tiny_loaded

N_LAYERS, N_HEADS = 3, 4  # the tiny llama-gqa of conftest


@pytest.fixture(scope="module")
def loaded() -> object:
    return tiny_loaded("llama-gqa")


@pytest.fixture
def ids() -> list[int]:
    return np.random.default_rng(5).integers(0, 96, size=90).tolist()


def hf_probe(ids: list[int]) -> tuple[dict[int, dict[str, torch.Tensor]], torch.Tensor]:
    """Hugging Face's eager attention on the same tiny model, recording each layer's post-RoPE q, k and
    per-head output; returns them and HF's own mean next-token loss."""
    found: dict[int, dict[str, torch.Tensor]] = {}

    def probe(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):  # noqa: ANN001, ANN003
        out, weights = eager_attention_forward(module, query, key, value, attention_mask, scaling, 0.0)
        found[module.layer_idx] = {"q": query, "k": key, "out": out, "scaling": scaling, "mask": attention_mask}
        return out, weights

    AttentionInterface.register("probe", probe)
    AttentionMaskInterface.register("probe", eager_mask)
    model = build_tiny("llama-gqa", "probe")
    with torch.no_grad():
        input_ids = torch.tensor([ids])
        loss = model(input_ids, labels=input_ids).loss
    return found, loss


def reference_scores(layer: dict[str, torch.Tensor]) -> torch.Tensor:
    """(head, query, key) pre-softmax scores with the causal mask, from HF's q and k."""
    k = layer["k"].repeat_interleave(layer["q"].shape[1] // layer["k"].shape[1], dim=1)  # (1, head, key, d)
    scores = (layer["q"] @ k.transpose(-1, -2))[0] * layer["scaling"]  # (head, query, key)
    n = scores.shape[-1]
    return scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))


def test_withheld_mass_and_output_norms_equal_hugging_face(loaded: object, ids: list[int]) -> None:
    found, _ = hf_probe(ids)
    trace = analyze_ids(loaded, ids)
    o_proj = [layer.self_attn.o_proj.weight for layer in loaded.model.model.layers]
    for layer in range(N_LAYERS):
        withheld = torch.sigmoid(-torch.logsumexp(reference_scores(found[layer]), -1))  # 1 / (1 + sum e^s)
        w = o_proj[layer].reshape(o_proj[layer].shape[0], N_HEADS, -1)  # (d_model, head, head_dim)
        out = torch.einsum("qhd,mhd->hqm", found[layer]["out"][0], w).norm(dim=-1)  # (head, query)
        maps = attention_maps(loaded, ids, layer)
        np.testing.assert_allclose(maps.withheld, withheld.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(maps.output_norms, out.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(trace.heads["withheld"][layer], withheld[:, 1:].mean(-1).numpy(), rtol=1e-4)
        np.testing.assert_allclose(trace.heads["output_norm"][layer], out[:, 1:].mean(-1).numpy(), rtol=1e-4)


def test_key_geometry_equals_a_direct_computation(loaded: object, ids: list[int]) -> None:
    ids = ids[:89]  # 88 keys after the first: an even count, where numpy's median and torch's differ
    found, _ = hf_probe(ids)
    geometry = key_geometry(loaded, ids)
    for layer in range(N_LAYERS):
        q = found[layer]["q"][0]  # (head, query, d)
        k = found[layer]["k"][0].repeat_interleave(2, dim=0)  # (head, key, d)
        cos = torch.nn.functional.cosine_similarity(q[:, :, None], k[:, None], dim=-1)  # (head, query, key)
        others = [cos[:, t, 1 : t + 1].mean(-1) for t in range(1, len(ids))]
        assert geometry["first_key_cosine"][layer] == pytest.approx(float(cos[:, 1:, 0].mean()), rel=1e-4)
        assert geometry["other_key_cosine"][layer] == pytest.approx(float(torch.stack(others).mean()), abs=1e-5)
        assert geometry["first_key_norm"][layer] == pytest.approx(float(k[:, 0].norm(dim=-1).mean()), rel=1e-5)
        others_norm = np.median(k[:, 1:].norm(dim=-1).numpy(), axis=-1).mean()  # numpy's median, as metrics.md
        assert geometry["other_key_norm"][layer] == pytest.approx(float(others_norm), rel=1e-5)


def test_the_intact_loss_is_hugging_faces_own_loss(loaded: object, ids: list[int]) -> None:
    _, loss = hf_probe(ids)
    assert interventions.outcome(loaded, ids).loss == pytest.approx(float(loss), rel=1e-5)


def drop_and_softmax(scores: torch.Tensor, k: int) -> torch.Tensor:
    edited = scores.clone()
    interventions.DropFirst(k, (0,)).edit_scores(0, edited, torch.arange(scores.shape[-2]))
    return torch.softmax(edited, -1)


def causal_scores(values: torch.Tensor) -> torch.Tensor:
    n = values.shape[-1]
    return values.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), chunked.MIN_SCORE)


def test_dropping_keys_renormalizes_the_rest_exactly() -> None:
    scores = causal_scores(torch.randn(2, 3, 6, 6))  # (kv_head, group, rows, keys)
    weights = drop_and_softmax(scores, 2)
    expected = metrics.without_first_keys(torch.softmax(scores, -1).numpy(), 2)
    np.testing.assert_allclose(weights[..., 2:, 2:].numpy(), expected[..., 2:, :], atol=1e-6)
    np.testing.assert_allclose(weights.sum(-1).numpy(), 1, atol=1e-6)


def test_dropping_the_only_key_a_sink_head_reads_leaves_rows_defined() -> None:
    one_hot = torch.zeros(5, 5)
    one_hot[:, 0] = 200.0  # every query puts all its weight on key 0: softmax gives exactly 1 there
    weights = drop_and_softmax(causal_scores(one_hot)[None, None], 1)[0, 0]
    assert weights[0, 0] == 1  # row 0 sees nothing else: kept as it was, not NaN
    assert torch.isfinite(weights).all() and (weights[1:, 0] == 0).all()
    np.testing.assert_allclose(weights.sum(-1).numpy(), 1, atol=1e-6)
    np.testing.assert_allclose(weights[3, 1:4].numpy(), 1 / 3, atol=1e-6)  # renormalized over what is left


def test_dropping_the_first_key_in_some_layers_zeroes_their_sink_only(loaded: object, ids: list[int]) -> None:
    intact = interventions.outcome(loaded, ids)
    dropped = interventions.outcome(loaded, ids, interventions.DropFirst(1, (1, 2)))
    np.testing.assert_allclose(dropped.heads["sink"][0], intact.heads["sink"][0], rtol=1e-6)
    assert (dropped.heads["sink"][1:] == 0).all()
    np.testing.assert_allclose(dropped.token_cosine[:2], intact.token_cosine[:2], rtol=1e-6)  # h^0, h^1 untouched
    assert dropped.loss != intact.loss


@pytest.mark.parametrize("target, metric", [("sink", "sink"), ("diagonal", "diagonal")])
def test_forcing_heads_makes_them_exactly_that_kind(loaded: object, ids: list[int], target: str, metric: str) -> None:
    intact = interventions.outcome(loaded, ids)
    forced = interventions.outcome(loaded, ids, interventions.ForceHeads(((1, 0), (1, 3), (2, 2)), target))
    for layer, head in ((1, 0), (1, 3), (2, 2)):
        assert forced.heads[metric][layer, head] == pytest.approx(1.0)
        assert forced.heads["entropy"][layer, head] == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(forced.heads["sink"][0], intact.heads["sink"][0], rtol=1e-6)
    np.testing.assert_allclose(forced.heads["sink"][1, 1:3], intact.heads["sink"][1, 1:3], rtol=1e-6)


def test_dense_heads_spread_evenly_over_the_keys_they_can_see(loaded: object, ids: list[int]) -> None:
    chosen = ((1, 0), (2, 3))
    dense = interventions.outcome(loaded, ids, interventions.ForceHeads(chosen, "uniform"))
    expected_sink = np.mean(1 / np.arange(2, len(ids) + 1))  # A[t,0] = 1/(t+1) over t in Q
    for layer, head in chosen:
        assert dense.heads["entropy"][layer, head] == pytest.approx(1.0, abs=1e-5)  # uniform over the visible keys
        assert dense.heads["sink"][layer, head] == pytest.approx(expected_sink, rel=1e-5)
    assert dense.token_cosine_scaled.shape == dense.token_cosine.shape == (4,)


def test_a_perturbation_reaches_only_later_predictions(loaded: object, ids: list[int]) -> None:
    intact = interventions.outcome(loaded, ids)
    nudged = interventions.outcome(loaded, ids, interventions.Perturb(40, 5.0))
    np.testing.assert_allclose(nudged.nll[:40], intact.nll[:40], rtol=1e-5)
    assert not np.allclose(nudged.nll[40:], intact.nll[40:])
    kl = interventions.sensitivity(loaded, ids, [0, 40], 5.0)
    assert kl[0] > 0 and kl[40] > 0
    assert interventions.sensitivity(loaded, ids, [0, 40], 0.0) == {0: 0.0, 40: 0.0}


def test_set_activations_hold_cells_from_a_layer_on(loaded: object, ids: list[int]) -> None:
    change = interventions.SetActivations(((0, 3), (5, 7)), None, from_layer=2)
    hidden = torch.ones(1, 8, 16)
    assert change.edit_residual(1, hidden) is hidden
    edited = change.edit_residual(2, hidden)
    assert edited[0, 0, 3] == 0 and edited[0, 5, 7] == 0 and edited.sum() == 8 * 16 - 2 and hidden.sum() == 8 * 16
    means = interventions.SetActivations(((0, 3),), ((1.0,), (2.0,), (3.0,), (4.0,)), from_layer=1)
    assert means.edit_residual(3, hidden)[0, 0, 3] == 4.0
    intact = interventions.outcome(loaded, ids).nll
    with pytest.raises(InputError, match=f"outside this model's layers 0-{N_LAYERS}"):  # issue 38: it changed nothing
        interventions.outcome(loaded, ids, interventions.SetActivations(((0, 3),), None, N_LAYERS + 1))
    zeroed = interventions.outcome(loaded, ids, interventions.SetActivations(((0, 3), (1, 3)), None, 1))
    assert not np.allclose(zeroed.nll, intact, rtol=1e-5)


def test_massive_means_take_each_channels_peak_per_layer(loaded: object, ids: list[int]) -> None:
    texts = [ids[:30], ids[30:60]]
    means = interventions.massive_means(loaded, texts, [3, 7])
    expected = np.zeros((N_LAYERS + 1, 2))
    for text in texts:
        residual = analyze_ids(loaded, text).residual  # (layer + 1, token, d_model)
        for layer in range(N_LAYERS + 1):
            for column, channel in enumerate((3, 7)):
                values = residual[layer, :, channel]
                expected[layer, column] += values[np.abs(values).argmax()] / len(texts)
    np.testing.assert_allclose(means, expected, rtol=1e-5)


def test_replacing_the_first_token_changes_only_the_input(loaded: object, ids: list[int]) -> None:
    change = interventions.ReplaceFirst(7, "x")
    assert change.input_ids(ids) == [7, *ids[1:]] and ids[0] != 7
    replaced, intact = interventions.outcome(loaded, ids, change), interventions.outcome(loaded, ids)
    assert replaced.nll.shape == intact.nll.shape == (len(ids) - 1,)
    assert not np.allclose(replaced.nll, intact.nll)  # every prediction reads token 0
    np.testing.assert_allclose(replaced.nll, interventions.outcome(loaded, change.input_ids(ids)).nll)


def test_interventions_refuse_a_single_token(loaded: object) -> None:
    with pytest.raises(InputError, match="at least two tokens"):
        interventions.outcome(loaded, [3])


def test_single_token_replacements_with_the_real_tokenizer(smollm2: object) -> None:
    assert interventions.single_token(smollm2, "\n").token == "↵"
    with pytest.raises(InputError, match="exactly one"):
        interventions.single_token(smollm2, "two words here")
    word = interventions.random_word(smollm2.tokenizer, seed=3)
    assert word.startswith(" ") and len(smollm2.tokenizer.encode(word, add_special_tokens=False)) == 1


def test_the_real_model_collapses_without_its_massive_activations(smollm2: object) -> None:
    text = "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"
    ids = smollm2.tokenizer.encode(text)
    trace = analyze_ids(smollm2, ids)
    assert trace.massive, "SmolLM2 has massive activations on its first token"
    intact = interventions.outcome(smollm2, ids)
    zero = interventions.outcome(smollm2, ids, interventions.set_massive(smollm2, trace.massive, "zero", 1))
    mean = interventions.outcome(smollm2, ids, interventions.set_massive(smollm2, trace.massive, "mean", 1))
    assert zero.loss - intact.loss > 2 * (mean.loss - intact.loss) > 0
    assert intact.top[0][0] == "␣Rome"


def test_the_perturbation_unit_is_the_median_norm_of_h0(loaded: object, ids: list[int]) -> None:
    h0 = analyze_ids(loaded, ids).residual[0]  # (token, d_model): what the model's first layer reads
    assert interventions.embedding_scale(loaded, ids) == pytest.approx(float(np.median(np.linalg.norm(h0, axis=-1))))
