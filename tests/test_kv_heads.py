"""Which heads need the whole context (issue 41, item 3): each head's sinks + window ablation against transformers'
eager forward with that head's mask edited, DuoAttention's policy against the same with every streaming head's, the
stopped run, the refusals, and SmolLM2."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from sinkscope.core.errors import ModelLoadError
from sinkscope.core.loss import perplexity
from sinkscope.core.models import LoadedModel
from sinkscope.core.texts import builtin_text
from sinkscope.experiments import head_effects, kv_heads
from sinkscope.experiments.kv_evict import SINKS
from sinkscope.experiments.streaming import band_mask
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask
from transformers.models.llama.modeling_llama import eager_attention_forward

from tests.helpers import array, chart, open_page, submit
from tests.tiny import N_TOKENS, build, loaded_tiny, slow_loaded

pytestmark = pytest.mark.slow  # see pytest.ini: which worker, and whether make check runs them

BUDGET = 12
EDITED = "test_edited_eager"


@pytest.fixture(scope="module")
def ids() -> list[int]:
    return np.random.default_rng(17).integers(3, 96, size=N_TOKENS).tolist()


@pytest.fixture(scope="module")
def needs(ids: list[int]) -> kv_heads.HeadNeeds:
    return kv_heads.head_needs(loaded_tiny("llama"), ids, BUDGET)


def edited_eager(restricted: np.ndarray, band: torch.Tensor) -> None:
    """Register transformers' eager attention with the (layer, head) ``restricted`` heads masked to ``band``."""

    def attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        heads = torch.from_numpy(restricted[module.layer_idx])[None, :, None, None]  # (1, head, 1, 1)
        blocked = heads & ~band  # (1, head, query, key)
        mask = attention_mask.masked_fill(blocked, torch.finfo(attention_mask.dtype).min)
        return eager_attention_forward(module, query, key, value, mask, **kwargs)

    AttentionInterface.register(EDITED, attend)
    AttentionMaskInterface.register(EDITED, eager_mask)


def edited_nll(model: torch.nn.Module, ids: list[int], restricted: np.ndarray, budget: int) -> float:
    """Mean NLL of ids[1:] from the eager forward with ``restricted`` heads masked to sinks + window."""
    edited_eager(restricted, band_mask(len(ids), SINKS, budget - SINKS))
    inputs = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=inputs).logits[0, :-1]
    return float(torch.nn.functional.cross_entropy(logits.double(), inputs[0, 1:]))


@contextmanager
def implementation(model: torch.nn.Module, name: str) -> Iterator[None]:
    """``model`` attends with ``name`` for the block (a loaded model's own is put back after)."""
    was = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = was


def test_each_heads_loss_change_equals_the_eager_forward_with_its_mask_edited(
    needs: kv_heads.HeadNeeds, ids: list[int]
) -> None:
    edited_eager(np.zeros(needs.change.shape, dtype=bool), band_mask(len(ids), SINKS, BUDGET - SINKS))
    model = build("llama", EDITED)
    intact = edited_nll(model, ids, np.zeros(needs.change.shape, dtype=bool), BUDGET)
    assert needs.dense_nll.mean() == pytest.approx(intact, abs=1e-5)
    for layer, head in np.ndindex(needs.change.shape):
        alone = np.zeros(needs.change.shape, dtype=bool)
        alone[layer, head] = True
        assert needs.change[layer, head] == pytest.approx(edited_nll(model, ids, alone, BUDGET) - intact, abs=1e-5)
    assert np.abs(needs.change).max() > 1e-3  # the band does change what these heads read


def test_duo_policy_is_the_forward_with_every_streaming_kv_heads_mask_edited(
    needs: kv_heads.HeadNeeds, ids: list[int]
) -> None:
    change = np.zeros_like(needs.change)
    change[0, 1] = change[1, 3] = 1.0  # two retrieval heads: their key-value heads (groups of two) keep everything
    chosen = kv_heads.HeadNeeds(BUDGET, needs.dense_nll, change)
    policy = kv_heads.duo_policy(loaded_tiny("llama"), ids, chosen)
    assert policy.streaming.tolist() == [[False, True], [True, False], [True, True]]  # (layer, kv_head)
    restricted = np.repeat(policy.streaming, 2, axis=1)  # (layer, head)
    expected = edited_nll(build("llama", EDITED), ids, restricted, BUDGET)
    assert policy.nll.mean() == pytest.approx(expected, abs=1e-5)
    assert policy.cache_share == pytest.approx((2 * N_TOKENS + 4 * BUDGET) / (6 * N_TOKENS))


def test_a_stopped_map_keeps_the_heads_it_measured_and_counts_the_rest_as_retrieval(ids: list[int]) -> None:
    seen = []
    stopped = kv_heads.head_needs(loaded_tiny("llama"), ids, BUDGET, lambda so_far: seen.append(so_far) and False)
    assert len(seen) == 1  # one unit: layer 0's first head (a unit costs at most about one forward)
    assert np.isfinite(stopped.change[0, :1]).all() and np.isnan(stopped.change[0, 1:]).all()
    assert np.isnan(stopped.change[1:]).all()
    policy = kv_heads.duo_policy(loaded_tiny("llama"), ids, stopped)
    assert not policy.streaming[0, 1] and not policy.streaming[1:].any()  # unmeasured heads keep their whole cache


def test_a_pause_comes_after_every_block_of_every_unit(ids: list[int]) -> None:
    """Issue 54, item 3: a server hands the model over between the blocks of a unit, not only between units."""
    loaded, pauses = loaded_tiny("llama"), []
    found = kv_heads.head_needs(loaded, ids, BUDGET, pause=lambda: pauses.append(1))
    units = head_effects.units(head_effects.unmeasured(loaded), np.ones(found.change.shape, dtype=bool))
    blocks = sum(loaded.info.n_layers - layer for layer, _ in units)
    assert len(pauses) == blocks and np.isfinite(found.change).all()
    np.testing.assert_array_equal(found.change, kv_heads.head_needs(loaded, ids, BUDGET).change)  # the same map


def test_the_map_is_refused_where_it_would_be_wrong(ids: list[int]) -> None:
    with pytest.raises(ModelLoadError, match="slow path"):
        kv_heads.head_needs(slow_loaded("bloom"), ids, BUDGET)
    with pytest.raises(ModelLoadError, match="sliding-window"):
        kv_heads.head_needs(loaded_tiny("gemma3"), ids, BUDGET)


def test_smollm2_heads_match_the_eager_forward_and_the_policy_keeps_its_loss(smollm2: LoadedModel) -> None:
    ids = smollm2.encode(builtin_text(), 96, truncate=True)
    budget, layers = 24, 2
    found = kv_heads.head_needs(smollm2, ids, budget, lambda so_far: not so_far.measured[layers - 1].all())
    assert np.isfinite(found.change[:layers]).all() and np.isnan(found.change[layers:]).all()
    model = smollm2.model
    with implementation(model, EDITED):
        intact = edited_nll(model, ids, np.zeros(found.change.shape, dtype=bool), budget)
        worst = np.unravel_index(np.nanargmax(found.change), found.change.shape)
        alone = np.zeros(found.change.shape, dtype=bool)
        alone[worst] = True
        assert found.change[worst] == pytest.approx(edited_nll(model, ids, alone, budget) - intact, abs=1e-4)
    policy = kv_heads.duo_policy(smollm2, ids, found)
    assert policy.streaming[:layers].any() and not policy.streaming[layers:].any()
    assert perplexity(policy.nll) < 1.1 * perplexity(found.dense_nll)  # streaming heads cost little together


def test_the_policy_curve_runs_from_every_head_streaming_to_the_dense_cache(
    needs: kv_heads.HeadNeeds, ids: list[int]
) -> None:
    curve = kv_heads.policy_curve(loaded_tiny("llama"), ids, needs, (0.0, 0.5, 1.0))
    every = edited_nll(build("llama", EDITED), ids, np.ones(needs.change.shape, dtype=bool), BUDGET)
    for policies in curve.values():
        assert [policy.retrieval_share for policy in policies] == [0.0, 0.5, 1.0]
        assert policies[0].nll.mean() == pytest.approx(every, abs=1e-5)
        np.testing.assert_allclose(policies[-1].nll, needs.dense_nll, atol=1e-5)
    by_kv_head = needs.change.reshape(3, 2, 2).max(-1)  # (layer, kv_head, group) -> (layer, kv_head)
    ranked = kv_heads.whole_heads(needs, 2, 0.5)
    assert by_kv_head[ranked].min() >= by_kv_head[~ranked].max()  # the costliest half is kept whole


def test_the_kv_page_maps_every_head_beside_its_kind_and_runs_duoattentions_policy(smollm2: LoadedModel) -> None:
    at = open_page("kv")
    at.select_slider(key="kv_h_tokens").set_value(128)
    at.select_slider(key="kv_h_budget").set_value(32)
    submit(at, "Measure every head")  # by default: estimated, then exact near the threshold
    shown = array(chart(at, "kv_heads_map")["data"][0]["z"])
    assert shown.shape == (smollm2.info.n_layers, smollm2.info.n_heads) and np.isfinite(shown).all()
    ids = smollm2.encode(builtin_text(), 128, truncate=True, add_bos=False)
    found = kv_heads.confirm_needs(smollm2, ids, kv_heads.estimate_needs(smollm2, ids, 32))
    np.testing.assert_allclose(shown, found.change, atol=1e-6)
    crossed = [line for line in chart(at, "kv_heads_map")["data"] if line.get("name") == "estimated to first order"]
    assert sum(len(array(line["x"])) for line in crossed) == found.estimates.sum()  # a cross on each estimate
    exact = int(found.measured.sum() - found.estimates.sum())
    counted = any(f"{exact} heads measured exactly" in caption.value for caption in at.caption)
    assert counted == bool(found.estimates.any())  # the count is said when some cells are estimates
    assert array(chart(at, "kv_heads_kinds")["data"][0]["z"]).shape == shown.shape
    said = " ".join(m.value for m in at.markdown)
    assert f"of {shown.size} heads" in said and "Restricted all at once" in said
    curve = chart(at, "kv_duo")["data"]
    assert [line["name"] for line in curve] == ["whole heads chosen by the map", "whole heads chosen at random"]
    assert curve[0]["x"][-1] == pytest.approx(100)  # every head whole: the full cache
    at.radio(key="kv_h_how").set_value("exact")
    submit(at, "Measure every head")
    every = array(chart(at, "kv_heads_map")["data"][0]["z"])
    first = kv_heads.head_needs(smollm2, ids, 32, lambda so_far: not so_far.measured[0].all())  # layer 0 only
    np.testing.assert_allclose(every[0], first.change[0], atol=1e-6)
    assert all(trace.get("name") != "estimated to first order" for trace in chart(at, "kv_heads_map")["data"])


@pytest.mark.parametrize(("policy_nll", "key"), [(2.2, "kv.heads_policy_said"), (2.01, "kv.heads_policy_little")])
def test_the_sentence_says_small_costs_add_up_only_when_the_policy_is_a_little_worse(policy_nll: float,
                                                                                     key: str) -> None:  # fmt: skip
    needs = kv_heads.HeadNeeds(8, np.full(4, 2.0), np.array([[0.0, 0.5], [0.001, np.nan]]))
    policy = kv_heads.DuoPolicy(np.array([[True]]), np.full(4, policy_nll), 0.5, np.full(4, 2.0))
    said = kv_heads.said(needs, policy)  # e^0.2 = 1.22 of dense adds up; e^0.01 = 1.01 does not
    assert said.key == key and dict(said.params)["streaming"] == 2 and dict(said.params)["measured"] == 3
    assert kv_heads.said(kv_heads.HeadNeeds(8, needs.dense_nll, np.full((2, 2), np.nan)), None) is None


def test_a_map_that_places_no_head_says_so_instead_of_a_share() -> None:
    """A stopped confirmation whose every estimated cell's band holds the threshold: no share of nothing (it was a
    crash on the page, a NaN rounded)."""
    change = np.array([[0.005, 0.0], [0.009, -0.001]])
    needs = kv_heads.HeadNeeds(8, np.full(4, 2.0), change, change - 0.025, change + 0.025, np.ones((2, 2), bool))
    said = kv_heads.said(needs, None)
    assert "this run places no head on either side" in said.text("en") and "nan" not in said.text("en")
