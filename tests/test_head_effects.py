"""Every head in seconds (issue 53): the first-order estimate of each head's restriction against a finite difference
of transformers' eager forward with that head's output moved a small step towards its restricted output, and the
confirmed map's exact cells against the eager forward with that head's mask edited."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sinkscope.core.models import LoadedModel
from sinkscope.core.texts import builtin_text
from sinkscope.experiments import head_effects, kv_heads, sink_heads
from sinkscope.experiments.kv_evict import SINKS
from sinkscope.experiments.streaming import band_mask
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask
from transformers.models.llama.modeling_llama import eager_attention_forward

from tests.helpers import array, chart, open_page, submit
from tests.test_kv_heads import EDITED, edited_eager, edited_nll, implementation
from tests.tiny import N_TOKENS, build, loaded_tiny

pytestmark = pytest.mark.slow  # see pytest.ini: which worker, and whether make check runs them

BUDGET = 6  # a window of two: heads on every side of the threshold, in every layer
BAND = {"margin": 0.004}  # a random model's effects are small: a band that leaves some heads estimated
STEPPED = "test_stepped_eager"


@pytest.fixture(scope="module")
def ids() -> list[int]:
    return np.random.default_rng(17).integers(3, 96, size=N_TOKENS).tolist()


def stepped_eager(layer: int, head: int, alpha: float, allowed: torch.Tensor) -> None:
    """Register transformers' eager attention with head ``head`` of ``layer`` answering dense + ``alpha`` x
    (restricted - dense): the path whose slope at 0 the estimate claims."""

    def attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        out, weights = eager_attention_forward(module, query, key, value, attention_mask, **kwargs)
        if module.layer_idx != layer:
            return out, weights
        mask = attention_mask.masked_fill(~allowed, torch.finfo(attention_mask.dtype).min)
        restricted, _ = eager_attention_forward(module, query, key, value, mask, **kwargs)  # (1, token, head, d)
        out = out.clone()
        out[:, :, head] += alpha * (restricted[:, :, head] - out[:, :, head])
        return out, weights

    AttentionInterface.register(STEPPED, attend)
    AttentionMaskInterface.register(STEPPED, eager_mask)


def slope(model: torch.nn.Module, ids: list[int], layer: int, head: int, allowed: torch.Tensor, alpha: float) -> float:
    """(L(alpha) - L(-alpha)) / 2 alpha of the mean NLL of ids[1:]: the central finite difference."""
    inputs = torch.tensor([ids])
    losses = []
    for step in (alpha, -alpha):
        stepped_eager(layer, head, step, allowed)
        with torch.no_grad():
            logits = model(input_ids=inputs).logits[0, :-1]
        losses.append(float(torch.nn.functional.cross_entropy(logits.double(), inputs[0, 1:])))
    return (losses[0] - losses[1]) / (2 * alpha)


def test_every_heads_estimate_is_the_slope_of_the_loss_towards_its_restriction(ids: list[int]) -> None:
    band = band_mask(len(ids), SINKS, BUDGET - SINKS)
    found = kv_heads.estimate_needs(loaded_tiny("llama"), ids, BUDGET)
    assert found.estimates.all() and found.change.shape == (3, 4)
    stepped_eager(0, 0, 0.0, band)
    model = build("llama", STEPPED).double()  # float64, a central step: its error is alpha squared
    for layer, head in np.ndindex(found.change.shape):
        expected = slope(model, ids, layer, head, band, 1e-2)
        assert found.change[layer, head] == pytest.approx(expected, rel=2e-3, abs=2e-7)
    assert np.abs(found.change).max() > 1e-3  # the band does change what these heads read


def test_the_removed_first_key_estimate_is_its_slope_too(ids: list[int]) -> None:
    no_first = head_effects.without_first_key(len(ids))
    loaded = loaded_tiny("llama")
    found = head_effects.estimate(loaded, ids, no_first, **BAND)
    stepped_eager(0, 0, 0.0, no_first)
    model = build("llama", STEPPED).double()
    for layer, head in [(0, 1), (2, 3)]:
        assert found.change[layer, head] == pytest.approx(slope(model, ids, layer, head, no_first, 1e-2), rel=2e-3)


def test_confirmed_cells_are_exact_and_the_rest_stay_estimates_far_from_the_threshold(ids: list[int]) -> None:
    loaded = loaded_tiny("llama")
    first = kv_heads.estimate_needs(loaded, ids, BUDGET, **BAND)
    found = kv_heads.confirm_needs(loaded, ids, first)
    confirmed = first.unsettled()
    assert confirmed.any() and (~confirmed).any()  # this text needs both kinds of cell
    np.testing.assert_array_equal(found.estimates, ~confirmed)
    np.testing.assert_array_equal(found.change[~confirmed], first.change[~confirmed])
    assert (found.high[~confirmed] <= np.log1p(kv_heads.NEEDS_CONTEXT)).all()  # settled by the estimate's band
    exact = kv_heads.head_needs(loaded, ids, BUDGET)
    np.testing.assert_allclose(found.change[confirmed], exact.change[confirmed], atol=1e-6)
    edited_eager(np.zeros(found.change.shape, dtype=bool), band_mask(len(ids), SINKS, BUDGET - SINKS))
    edited_model = build("llama", EDITED)
    intact = edited_nll(edited_model, ids, np.zeros(found.change.shape, dtype=bool), BUDGET)
    for layer, head in zip(*np.nonzero(confirmed), strict=True):
        alone = np.zeros(found.change.shape, dtype=bool)
        alone[layer, head] = True
        assert found.change[layer, head] == pytest.approx(edited_nll(edited_model, ids, alone, BUDGET) - intact,
                                                          abs=1e-5)  # fmt: skip


def test_a_stopped_confirmation_keeps_what_it_confirmed(ids: list[int]) -> None:
    seen = []
    loaded = loaded_tiny("llama")
    first = kv_heads.estimate_needs(loaded, ids, BUDGET, **BAND)
    stopped = kv_heads.confirm_needs(loaded, ids, first, lambda so_far: seen.append(so_far) and False)
    assert len(seen) == 1
    confirmed = first.unsettled() & ~stopped.estimates
    layer = int(np.flatnonzero(confirmed.any(-1))[0])
    assert 0 < confirmed.sum() <= head_effects.lanes(layer, 3) and confirmed[layer].sum() == confirmed.sum()  # a unit
    assert (first.unsettled() & stopped.estimates).any()
    np.testing.assert_array_equal(seen[0].estimates, stopped.estimates)
    assert np.isfinite(stopped.change[first.measured]).all()  # every head keeps a number: exact or estimated


def test_smollm2_first_layers_estimate_is_the_slope_and_a_confirmed_cell_is_exact(smollm2: LoadedModel) -> None:
    ids = smollm2.encode(builtin_text(), 96, truncate=True)
    budget = 24
    found = kv_heads.estimate_needs(smollm2, ids, budget)
    band = band_mask(len(ids), SINKS, budget - SINKS)
    model = smollm2.model
    with implementation(model, STEPPED):
        for layer in (0, 1):
            head = int(np.argmax(np.abs(found.change[layer])))
            expected = slope(model, ids, layer, head, band, 1e-2)  # float32: a step well above its rounding
            assert found.change[layer, head] == pytest.approx(expected, rel=2e-2, abs=2e-5)


def test_the_top_heads_sink_removal_is_exact_and_the_strongest_is_named(ids: list[int]) -> None:
    found = sink_heads.sink_heads(loaded_tiny("llama"), ids, top=3)
    assert (~found.estimated).sum() == 3 and np.isfinite(found.change).all()
    no_first = head_effects.without_first_key(len(ids))
    edited_eager(np.zeros(found.change.shape, dtype=bool), no_first)
    model = build("llama", EDITED)
    intact = removed_first_nll(model, ids, np.zeros(found.change.shape, dtype=bool))
    for layer, head in zip(*np.nonzero(~found.estimated), strict=True):
        alone = np.zeros(found.change.shape, dtype=bool)
        alone[layer, head] = True
        assert found.change[layer, head] == pytest.approx(removed_first_nll(model, ids, alone) - intact, abs=1e-5)
    assert found.strongest() == np.unravel_index(np.nanargmax(np.where(found.estimated, np.nan, found.change)), (3, 4))
    said = dict(sink_heads.said(found).params)
    assert (said["exact"], said["estimated"]) == (3, 9)


def removed_first_nll(model: torch.nn.Module, ids: list[int], restricted: np.ndarray) -> float:
    """Mean NLL of ids[1:] from the eager forward with the ``restricted`` heads' first key removed (DropFirst's edit:
    every query but the first loses key 0)."""
    edited_eager(restricted, head_effects.without_first_key(len(ids)))
    inputs = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=inputs).logits[0, :-1]
    return float(torch.nn.functional.cross_entropy(logits.double(), inputs[0, 1:]))


def test_the_break_page_maps_which_heads_sinks_matter(smollm2: LoadedModel) -> None:
    at = submit(open_page("break"), "Estimate every head")
    shown = chart(at, "br_sink_heads")["data"]
    assert array(shown[0]["z"]).shape == (smollm2.info.n_layers, smollm2.info.n_heads)
    crossed = next(line for line in shown if line.get("name") == "estimated to first order")
    assert len(array(crossed["x"])) == smollm2.info.n_layers * smollm2.info.n_heads - sink_heads.TOP
    said = " ".join(m.value for m in at.markdown)
    assert f"{sink_heads.TOP} heads measured exactly" in said
    assert array(chart(at, "br_sink_kinds")["data"][0]["z"]).shape == (smollm2.info.n_layers, smollm2.info.n_heads)


def test_every_unit_costs_at_most_about_one_forward_and_the_units_cover_each_chosen_head_once() -> None:
    """Issue 54, item 3: Stop and other visitors wait at most one unit; a unit of ``n`` heads from layer ``l`` runs
    the blocks from ``l`` on ``n`` times, so deep layers batch more heads than early ones."""
    n_layers, n_heads = 30, 9
    chosen = np.random.default_rng(0).random((n_layers, n_heads)) < 0.7
    start = head_effects.Cells(np.zeros(3), np.random.default_rng(1).random((n_layers, n_heads)),
                               np.zeros((n_layers, n_heads)), np.zeros((n_layers, n_heads)),
                               np.ones((n_layers, n_heads), dtype=bool))  # fmt: skip
    found = head_effects.units(start, chosen)
    covered = np.zeros_like(chosen)
    for layer, heads in found:
        assert len(heads) * (n_layers - layer) <= n_layers  # blocks run: at most one forward's worth
        assert not covered[layer, heads].any()
        covered[layer, heads] = True
    np.testing.assert_array_equal(covered, chosen)
    assert max(len(heads) for layer, heads in found if layer >= 20) >= 2  # cheap units batch their heads
