"""Training lab mechanics (not the paper's claims): gradients, data, a short run, saving."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from sinkscope import lab
from sinkscope.core.names import LAB_TASKS, POLARIZE_VARIANTS, TASK_VARIANTS
from sinkscope.lab import tasks, toy

SHIPPED = Path(__file__).resolve().parent.parent / "assets" / "lab"


@pytest.mark.parametrize("variant", POLARIZE_VARIANTS)
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
    batch = tasks.Induction().batch(200, torch.Generator().manual_seed(3))
    assert batch.inputs.shape == (200, 12) and (batch.inputs[:, 0] == tasks.BOS).all()
    assert (batch.active.sum(1) == 1).all() and batch.active[:, -1].all()  # the loss sees the last query only
    for row, target in zip(batch.inputs.tolist(), batch.targets[:, -1].tolist(), strict=True):
        body = row[1:-1]
        assert len(set(body)) == len(body) and tasks.BOS not in body  # distinct, no BOS inside
        assert body[body.index(row[-1]) + 1] == target  # the last token repeats one earlier: copy its successor


def test_backcopy_copies_the_token_before_each_trigger_and_only_triggers_are_active() -> None:
    task = tasks.Backcopy()
    _, triggers = task.chain()
    batch = task.batch(100, torch.Generator().manual_seed(4))
    x = batch.inputs
    for i, pos in zip(*torch.nonzero(torch.isin(x[:, :-1], triggers)).T.tolist(), strict=True):
        assert x[i, pos + 1] == x[i, pos - 1] and batch.active[i, pos]
    assert not batch.active[~torch.isin(x, triggers)].any()
    assert (batch.targets[:, :-1] == x[:, 1:]).all() and (batch.targets[:, -1] == tasks.IGNORE).all()
    assert not torch.isin(x[:, 1], triggers).any()  # a trigger right after BOS would copy BOS


def test_a_saved_run_loads_back_identically(tmp_path: Path) -> None:
    run = toy.train("induction", "sigmoid", steps=6, checkpoints=3, seed=2)
    run.save(tmp_path / "run.json")
    loaded = toy.TrainingRun.load(tmp_path / "run.json")
    assert loaded == run
    assert run.steps == [0, 2, 4, 6] and np.array(loaded.maps).shape == (4, 2, 4, 12, 12)
    assert np.array(loaded.bos_dormant).shape == (4, 2, 4)


def test_unnormalized_rows_report_their_raw_weight_and_total() -> None:
    """An untrained sigmoid head gives every key about 0.5: its BOS weight is no share, the row total shows it."""
    run = toy.train("backcopy", "sigmoid", steps=1, checkpoints=1, seed=0)
    bos, total = run.final("bos_dormant"), run.final("total_dormant")
    assert 0.3 < bos.max() < 0.7 and (total > 2).all()  # rows of up to 32 keys at about 0.5 each
    assert toy.findings([run]) == []  # one step learns nothing: no verdict
    quietest = tuple(int(i) for i in np.unravel_index(total.argmin(), total.shape))
    found = toy.findings([dataclasses.replace(run, accuracy=[1.0])])[0]
    assert found == toy.Finding("switch_off", "sigmoid", pytest.approx(total.min()), False, source=(0, *quietest))


def test_causal_masking_holds_for_unnormalized_variants() -> None:
    data = tasks.Backcopy()
    model = toy.TinyTransformer("linear", data.vocab, data.length, toy.SETUPS["backcopy"])
    _, maps, _ = model(data.batch(2, torch.Generator().manual_seed(0)).inputs)
    assert torch.triu(maps, diagonal=1).abs().max() == 0


BACKCOPY_SHIPPED = [v for v in TASK_VARIANTS if v != "linear"]  # linear does not learn it in 2,000 steps


@pytest.mark.parametrize("variant", BACKCOPY_SHIPPED)
def test_the_shipped_backcopy_runs_exist_for_two_seeds(variant: str) -> None:
    for seed in (0, 1):
        run = toy.TrainingRun.load(SHIPPED / "backcopy" / f"{variant}-seed{seed}.json")
        assert (run.task, run.variant, run.seed, run.steps[-1]) == ("backcopy", variant, seed, 2000)


def test_the_shipped_backcopy_runs_show_softmax_sinking_and_softmax_plus_one_withholding() -> None:
    """The claim the lab page makes: a softmax head >= 0.9 on BOS at dormant queries, softmax+1 <= 0.1."""
    shipped = [(v, s) for v in BACKCOPY_SHIPPED for s in (0, 1)]
    runs = {(v, s): toy.TrainingRun.load(SHIPPED / "backcopy" / f"{v}-seed{s}.json") for v, s in shipped}
    for seed in (0, 1):
        assert runs[("softmax", seed)].final("bos_dormant").max() >= 0.9
        assert runs[("softmax", seed)].final("bos_active").max() <= 0.1
        assert runs[("softmax+1", seed)].final("bos_dormant").max() <= 0.1
    verdicts = {found.claim: found.holds for found in toy.findings(list(runs.values()))}
    assert verdicts == {"sink": True, "withhold": True, "switch_off": True, "learned": True, "gate": False}


def test_the_shipped_built_in_sinks_say_where_the_dormant_mass_went() -> None:
    """A learned sink logit takes the dormant queries' mass instead of BOS; a gate closes at dormant queries and
    opens at active ones, and BOS (no longer needed) gets less than softmax gives it, but not Qiu et al.'s ~0."""
    for seed in (0, 1):
        learned = toy.TrainingRun.load(SHIPPED / "backcopy" / f"sink-logit-seed{seed}.json")
        assert learned.final("bos_dormant").max() <= 0.1 and 1 - learned.final("total_dormant").max() >= 0.9
        gated = toy.TrainingRun.load(SHIPPED / "backcopy" / f"gated-seed{seed}.json")
        softmax = toy.TrainingRun.load(SHIPPED / "backcopy" / f"softmax-seed{seed}.json")
        assert gated.final("gate_dormant").max() <= 0.1 and gated.final("gate_active").min() >= 0.5
        assert 0.1 < gated.final("bos_dormant").max() < softmax.final("bos_dormant").max()


def test_findings_of_the_built_in_sinks_follow_their_thresholds() -> None:
    def run(variant: str, bos: float, total: float, gate: float) -> toy.TrainingRun:
        cell = [[[[value]]] for value in (bos, total, gate)]  # one checkpoint of one layer of one head each
        return toy.TrainingRun("backcopy", variant, 0, accuracy=[1.0], bos_dormant=cell[0], total_dormant=cell[1],
                               gate_dormant=cell[2])  # fmt: skip

    found = {f.claim: f for f in toy.findings([run("sink-logit", 0.05, 0.3, 1.0), run("gated", 0.05, 1.0, 0.02)])}
    assert found["learned"] == toy.Finding("learned", "sink-logit", 0.05, True, pytest.approx(0.7))
    assert found["gate"] == toy.Finding("gate", "gated", 0.05, True, 0.02)
    kept = {f.claim: f.holds for f in toy.findings([run("sink-logit", 0.05, 0.8, 1.0), run("gated", 0.3, 1.0, 0.02)])}
    assert kept == {"learned": False, "gate": False}  # the logit took too little; BOS kept too much


def test_a_relu_run_that_ends_one_hot_is_told_apart_by_its_dead_units() -> None:
    """C7: "variants without normalization lack this term", beside a ReLU run whose weights end one-hot."""
    runs = {v: lab.PolarizeRun.load(SHIPPED / "polarize" / f"{v}-logistic-seed0.json") for v in POLARIZE_VARIANTS}
    assert {v for v, run in runs.items() if run.polarized()} == {"softmax", "softmax+1", "relu"}
    assert runs["relu"].dead() == len(runs["relu"].weights[-1]) - 1  # every candidate but the winner sits at 0
    assert runs["softmax"].dead() == runs["sigmoid"].dead() == 0


def test_a_softmax_plus_one_sink_that_forms_and_goes_is_found() -> None:
    """C9: softmax+1 seed 0 "needs no sink", beside a table whose first step >= 0.9 is 250."""
    seed0, seed1 = (toy.TrainingRun.load(SHIPPED / "backcopy" / f"softmax+1-seed{s}.json") for s in (0, 1))
    peak, step, released = seed0.transient_sink()
    assert peak >= 0.9 and seed0.first_sink_step() <= step < released and seed0.final("bos_dormant").max() <= 0.1
    assert seed1.transient_sink()[0] >= 0.8
    softmax = toy.TrainingRun.load(SHIPPED / "backcopy" / "softmax-seed0.json")
    assert softmax.transient_sink() is None  # a sink that stays is no transient


@pytest.mark.parametrize("task", LAB_TASKS)
def test_every_shipped_run_learned_its_task_on_two_seeds(task: str) -> None:
    """Item 5: the lab ships only runs whose task was learned (accuracy at active queries >= toy.LEARNED)."""
    runs = [toy.TrainingRun.load(path) for path in sorted((SHIPPED / task).glob("*.json"))]
    below = {(run.variant, run.seed): round(run.accuracy[-1], 3) for run in runs if run.accuracy[-1] < toy.LEARNED}
    assert runs and below == {}
    seeds = {variant: {run.seed for run in runs if run.variant == variant} for variant in {run.variant for run in runs}}
    assert all(len(found) >= 2 for found in seeds.values()), seeds


@pytest.mark.parametrize("task", LAB_TASKS)
def test_no_verdict_comes_from_a_run_that_did_not_learn(task: str) -> None:
    runs = [toy.TrainingRun.load(path) for path in sorted((SHIPPED / task).glob("*.json"))]
    learned = [run for run in runs if run.learned()]
    assert toy.findings(runs) == toy.findings(learned)
    forgetful = [dataclasses.replace(run, accuracy=[*run.accuracy[:-1], 0.5]) for run in runs]
    assert toy.findings(forgetful) == []


def test_each_verdict_names_the_seed_and_head_its_number_comes_from() -> None:
    """C8: a verdict of 0.760 beside a table of 1.445 / 2.072: two different heads, now named."""
    runs = {run.seed: run for run in map(toy.TrainingRun.load, sorted((SHIPPED / "induction").glob("sigmoid-*.json")))}
    found = next(f for f in toy.findings(list(runs.values())) if f.claim == "switch_off")
    seed, layer, head = found.source
    assert found.value == float(runs[seed].final("total_dormant")[layer, head])
    assert found.value == max(float(run.final("total_dormant").min()) for run in runs.values())
