"""The nudge spread, batched and reading the intact run's cache, against one unbatched full run per nudge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sinkscope.core.models import load_model
from sinkscope.experiments import interventions, nudges

from tests.tiny import build_tiny_model_dir, tiny_loaded


def one_run_per_nudge(loaded: object, ids: list[int], size: float, directions: int) -> np.ndarray:
    """The spread's definition run as written: every nudge its own full forward pass, batch size 1."""
    positions = tuple(sorted({max(1, min(len(ids) - 1, len(ids) * k // 4)) for k in nudges.QUARTERS}))
    start = positions[0]
    intact, _ = interventions._forward(loaded, ids, None, measure=False, logits_from=start)

    def kl(position: int, seed: int) -> torch.Tensor:
        change = interventions.Perturb(position, size, seed)
        changed, _ = interventions._forward(loaded, ids, change, measure=False, logits_from=start)
        return (intact.exp() * (intact - changed)).sum(-1)

    ratios = np.empty((directions, len(positions)))
    for seed in range(directions):
        first = kl(0, seed)
        for j, position in enumerate(positions):
            reached = slice(position - start, None)
            ratios[seed, j] = float(first[reached].mean() / kl(position, seed)[reached].mean())
    return ratios


@pytest.mark.parametrize("name", ["llama-gqa", "gemma3-sliding", "gpt2"])
def test_the_batched_spread_equals_one_full_run_per_nudge(name: str) -> None:
    """Llama's cache is cut at each nudged token; Gemma's sliding layers cannot be cut, so it runs every token."""
    loaded = tiny_loaded(name)
    ids = np.random.default_rng(3).integers(0, 96, size=41).tolist()
    spread = nudges.sensitivity_spread(loaded, ids, 2.0, directions=5)
    assert spread.positions == (10, 20, 30)
    np.testing.assert_allclose(spread.ratios, one_run_per_nudge(loaded, ids, 2.0, 5), rtol=2e-4)


def test_a_hybrid_runs_every_token_and_equals_one_full_run_per_nudge(tmp_path: Path) -> None:
    """Jamba's recurrent states cannot be cut back to a prefix: each nudge runs the whole text, still batched."""
    loaded = load_model(str(build_tiny_model_dir(tmp_path, family="jamba")))
    ids = np.random.default_rng(3).integers(5, 90, size=41).tolist()
    spread = nudges.sensitivity_spread(loaded, ids, 2.0, directions=3)
    np.testing.assert_allclose(spread.ratios, one_run_per_nudge(loaded, ids, 2.0, 3), rtol=2e-4)


def test_rows_are_split_to_fit_the_logits_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = tiny_loaded("llama-gqa")
    ids = np.random.default_rng(4).integers(0, 96, size=30).tolist()
    whole = nudges.sensitivity_spread(loaded, ids, 2.0, directions=4)
    monkeypatch.setattr(nudges, "LOGITS_BYTES", 4 * 20 * 96 * 2)  # two rows of 20 predictions of 96 tokens
    assert nudges._batches((0, 1, 2, 3, 4), 20, 96) == [(0, 1), (2, 3), (4,)]
    np.testing.assert_allclose(nudges.sensitivity_spread(loaded, ids, 2.0, directions=4).ratios, whole.ratios,
                               rtol=1e-5)  # fmt: skip


def test_a_nudge_moves_only_its_own_row_and_token() -> None:
    change = nudges.Nudges(at=2, size=3.0, seeds=(0, 7))
    hidden = torch.zeros(2, 4, 16)  # (row, token, d_model)
    moved = change.edit_residual(0, hidden)
    assert change.edit_residual(1, hidden) is hidden
    assert torch.count_nonzero(moved[:, [0, 1, 3]]) == 0
    np.testing.assert_allclose(moved[:, 2].norm(dim=-1), [3.0, 3.0], rtol=1e-6)
    single = interventions.Perturb(2, 3.0, seed=7).edit_residual(0, torch.zeros(1, 4, 16))
    torch.testing.assert_close(moved[1], single[0])
