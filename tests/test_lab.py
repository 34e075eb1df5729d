"""Training lab mechanics (not the paper's claims): gradients, data, a short run, saving."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sinkscope import lab


@pytest.mark.parametrize("variant", lab.VARIANTS)
def test_every_attention_variant_has_correct_gradients(variant: str) -> None:
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: lab.normalize(s, variant), (scores,))


def test_softmax_plus_one_is_softmax_with_a_silent_zero_key() -> None:
    scores = torch.randn(4, 6, dtype=torch.float64)
    expected = torch.exp(scores) / (1 + torch.exp(scores).sum(-1, keepdim=True))
    torch.testing.assert_close(lab.normalize(scores, "softmax+1"), expected)
    assert (lab.normalize(scores, "softmax+1").sum(-1) < 1).all()


def test_a_short_softmax_run_with_logistic_loss_lowers_the_entropy() -> None:
    run = lab.polarize("softmax", "logistic", steps=400, seed=1)
    assert run.entropy[0] > 0.99 and run.entropy[-1] < run.entropy[0] - 0.1
    assert run.train_loss[-1] < run.train_loss[0]
    assert run.steps == sorted(run.steps) and len(run.singular_values[-1]) == 8


def test_the_induction_answer_is_determined_by_the_sequence() -> None:
    inputs, targets = lab.induction_batch(200, torch.Generator().manual_seed(3))
    assert inputs.shape == (200, lab.LENGTH - 1) and (inputs[:, 0] == lab.BOS).all()
    for row, target in zip(inputs.tolist(), targets.tolist(), strict=True):
        body = row[1:-1]
        assert len(set(body)) == len(body) and lab.BOS not in body  # distinct, no BOS inside
        first = body.index(row[-1])  # the last token repeats exactly one earlier token
        assert body[first + 1] == target


def test_a_saved_run_loads_back_identically(tmp_path: Path) -> None:
    run = lab.train_induction("sigmoid", steps=6, checkpoints=3, seed=2)
    run.save(tmp_path / "run.json")
    loaded = lab.InductionRun.load(tmp_path / "run.json")
    assert loaded == run
    assert np.array(loaded.maps).shape == (3, 2, 4, lab.LENGTH - 1, lab.LENGTH - 1)
    assert 0 <= loaded.sink_rate() <= 100


def test_causal_masking_holds_for_unnormalized_variants() -> None:
    model = lab.TinyTransformer("linear")
    _, maps = model(lab.induction_batch(2, torch.Generator().manual_seed(0))[0])
    assert torch.triu(maps, diagonal=1).abs().max() == 0
