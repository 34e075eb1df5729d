"""The scoreboard's verdicts follow the numbers they are given (hand-built inputs, no model)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sinkscope.core.capture import Trace
from sinkscope.experiments import claims, cost, origin_claims
from sinkscope.experiments.interventions import Outcome
from sinkscope.experiments.kv_check import KVCheck
from sinkscope.experiments.kv_evict import Eviction
from sinkscope.experiments.kv_heads import DuoPolicy, HeadNeeds
from sinkscope.experiments.kv_quant import ClaimRuns
from sinkscope.experiments.nudges import Spread
from sinkscope.findings import origins
from sinkscope.lab.polarization import PolarizeRun
from sinkscope.lab.toy import TrainingRun


def trace(sink: float, bos_cosine: list[float], massive_tokens: list[int], value_sink: float = 0.2) -> Trace:
    """Four layers of two heads, all alike; ``bos_cosine`` per h^0 .. h^4."""
    heads = {name: np.full((4, 2), value) for name, value in
             (("sink", sink), ("value_norm_ratio", 0.2), ("value_sink", value_sink))}  # fmt: skip
    heads["kind"] = np.full((4, 2), "sink" if sink >= 0.5 else "mixed", dtype=object)
    layers = {"bos_cosine": np.array(bos_cosine), "top1": np.full(5, 900.0), "first_norm_ratio": np.ones(5)}
    massive = tuple((2, token, 7, 900.0) for token in massive_tokens)
    return Trace("m", (1, 2, 3), ("a", "b", "c"), heads, layers, massive, np.zeros((5, 3, 4)), np.zeros((4, 2, 3)),
                 np.zeros((4, 3)))  # fmt: skip


def outcome(nll: float, cosine: float = 0.5) -> Outcome:
    return Outcome(np.full(2, nll), (), {}, np.full(5, cosine), np.full(5, cosine))


def test_trace_claims_follow_their_thresholds() -> None:
    sinking = {v.claim: v for v in claims.from_trace(trace(0.8, [0.3, -0.1, -0.2, 0.4, 0.5], [0, 0, 3]))}
    assert {c: v.status for c, v in sinking.items()} == dict.fromkeys(sinking, "reproduces")
    assert all(v.why is None and v.evidence is not None for v in sinking.values())
    assert dict(sinking["half_space"].measured.params) == {"n": 2, "of": 3, "low": -0.2}
    flat = {v.claim: v for v in claims.from_trace(trace(0.1, [0.3, 0.1, 0.2, -0.4, 0.5], [3]))}
    assert flat["softmax_sink"].status == "differs" and flat["massive_first"].status == "differs"
    assert flat["half_space"].status == "partly"  # one of the three middle layers (h^1..h^3) is at or below 0
    assert flat["half_space"].why.text("en").startswith("Only 1 of 3 middle layers")
    assert flat["value_little"].status == "not_measured"  # no sink head on this text


def test_some_sink_heads_reading_their_sink_make_the_value_claim_partly() -> None:
    """C1 on the scoreboard: the sink's value is small, yet most sink heads take over half their output from it;
    and what removing the first key costs is a second claim, shown beside it."""
    removed = (outcome(2.0), outcome(5.5))
    verdict = claims.value_little(trace(0.9, [0.1] * 5, [0], value_sink=0.8), removed)
    assert verdict.status == "partly" and "8 of 8 sink heads" in verdict.why.text("en")
    assert "from layer 2 on (the break page's default) costs 3.5 nats per token" in verdict.evidence.text("en")
    assert claims.value_little(trace(0.9, [0.1] * 5, [0], value_sink=0.3), None).status == "reproduces"


@pytest.mark.parametrize(
    ("ppl", "status", "why"),
    [({"dense": 10.0, "window": 40.0, "sinks": 12.0}, "reproduces", None),
     ({"dense": 10.0, "window": 40.0, "sinks": 13.0}, "partly", "did not bring perplexity back"),
     ({"dense": 10.0, "window": 15.0, "sinks": 10.5}, "partly", "did not collapse"),
     ({"dense": 10.0, "window": 15.0, "sinks": 13.0}, "differs", "did not collapse")],
)  # fmt: skip
def test_streaming_weighs_both_margins_against_their_thresholds(ppl: dict, status: str, why: str | None) -> None:
    verdict = claims.from_streaming(ppl)
    assert verdict.status == status and (verdict.why is None) == (why is None)
    assert why is None or why in verdict.why.text("en")
    assert "4 sinks end" in verdict.evidence.text("en") and "threshold 25%" in verdict.evidence.text("en")


def test_a_missing_run_is_not_measured_instead_of_guessed() -> None:
    assert claims.from_streaming(None).status == "not_measured" and claims.from_sensitivity(None).measured is None
    assert claims.from_dense(None, None).status == "not_measured"


def test_cost_needs_the_sink_cheaper_with_aligned_and_random_embeddings() -> None:
    def cost(aligned: float | None, random: float) -> dict:
        return {"slopes": {"aligned/sink": aligned, "aligned/diagonal": 0.5, "random/sink": random,
                           "random/diagonal": 0.13}, "points": [{"n_tokens": 8}, {"n_tokens": 128}]}  # fmt: skip

    assert claims.from_cost(cost(0.0, 0.1)).status == "reproduces"  # a flat sink still counts: 0.0 is a slope
    ours = claims.from_cost(cost(0.03, 0.9))  # the shipped sweep: random embeddings give the sink no direction
    assert ours.status == "partly" and "no direction is shared" in ours.why.text("en")
    assert "T from 8 to 128" in ours.evidence.text("en")
    assert claims.from_cost(cost(None, 0.9)).status == "differs"  # a slope never found is not lower


def polarize_run(variant: str, end: float, final: list[float]) -> PolarizeRun:
    return PolarizeRun(variant, "logistic", {"steps": 3000}, weights=[[0.5] * len(final), final],
                       entropy=[1.0, end])  # fmt: skip


def test_sigmoid_and_relu_both_count_and_a_relu_run_of_dead_units_is_named() -> None:
    """C7 on the scoreboard: the shipped ReLU run ends one-hot because its units died, not by polarizing."""
    runs = {"softmax": polarize_run("softmax", 0.3, [1.0, 0, 0, 0]),
            "sigmoid": polarize_run("sigmoid", 0.95, [0.5] * 4),
            "relu": polarize_run("relu", 0.0, [0.9, 0, 0, 0])}  # fmt: skip
    polarizes, flat = claims.from_polarize(runs)
    assert polarizes.status == "reproduces" and flat.status == "partly"
    assert "3 of its weights died" in flat.why.text("en") and "3 of its 4 weights dead" in flat.measured.text("en")
    runs["relu"] = polarize_run("relu", 0.9, [0.5] * 4)
    assert claims.from_polarize(runs)[1].status == "reproduces"


def test_sensitivity_weighs_every_direction_and_position() -> None:
    """C6 on the scoreboard: one random direction no longer decides; the interval says how sure the median is."""
    always = Spread((3, 6, 9), np.full((8, 3), 2.5))
    assert claims.from_sensitivity(always).status == "reproduces"
    mixed = Spread((3, 6, 9), np.linspace(0.5, 3.0, 24).reshape(8, 3))
    verdict = claims.from_sensitivity(mixed)
    assert verdict.status == "partly" and "depends on the draw" in verdict.why.text("en")
    assert "8 random directions × positions 3, 6, 9" in verdict.evidence.text("en")
    less = claims.from_sensitivity(Spread((3, 6, 9), np.full((8, 3), 0.4)))
    assert less.status == "differs" and less.measured.text("en").startswith("nudging token 0 moves later "
                                                                           "predictions 2.5x less")  # fmt: skip
    assert "2,5 fois moins" in less.measured.text("fr")


def lab_run(variant: str, bos: float, accuracy: float = 1.0, total: float = 1.0, gate: float = 1.0) -> TrainingRun:
    return TrainingRun("backcopy", variant, 0, accuracy=[accuracy], bos_dormant=[[[bos]]],
                       total_dormant=[[[total]]], gate_dormant=[[[gate]]])  # fmt: skip


def test_lab_claims_come_from_runs_that_learned_and_say_which_seed_and_head() -> None:
    verdicts = {v.claim: v for v in claims.from_lab([lab_run("softmax", 0.95), lab_run("softmax+1", 0.02, total=0.1)])}
    assert verdicts["toy_sink"].status == "reproduces" and verdicts["plus_one"].status == "reproduces"
    assert "(seed 0, layer 0, head 0)" in verdicts["toy_sink"].measured.text("en")
    assert "1 of 1 softmax run learned" in verdicts["toy_sink"].evidence.text("en")
    assert verdicts["learned_sink"].status == "not_measured" and "train one" in verdicts["learned_sink"].why.text("en")
    gated = {v.claim: v for v in claims.from_lab([lab_run("softmax", 0.95), lab_run("gated", 0.4, gate=0.02)])}
    assert gated["gated"].status == "differs" and "harmless rather than absent" in gated["gated"].why.text("en")
    assert dict(gated["gated"].measured.params)["where"] == 0.02


def test_no_verdict_comes_from_a_run_that_did_not_learn() -> None:
    """A softmax run at accuracy 0.5 with a perfect sink, beside none that learned: not measured, and said why."""
    verdict = {v.claim: v for v in claims.from_lab([lab_run("softmax", 0.99, accuracy=0.5)])}["toy_sink"]
    assert verdict.status == "not_measured" and verdict.measured is None
    assert "0 of 1 softmax run learned" in verdict.evidence.text("en")
    assert "did not learn gives no verdict" in verdict.why.text("en")
    mixed = [lab_run("softmax", 0.2, accuracy=0.5), lab_run("softmax", 0.95)]  # only the learned run decides
    assert {v.claim: v for v in claims.from_lab(mixed)}["toy_sink"].status == "reproduces"


def test_the_scoreboard_gives_every_claim_in_order() -> None:
    evidence = claims.Evidence(
        trace(0.8, [0.3, -0.1, -0.2, 0.4, 0.5], [0]), [lab_run("softmax", 0.95)],
        {"softmax": polarize_run("softmax", 0.3, [1.0, 0]), "sigmoid": polarize_run("sigmoid", 0.95, [0.5, 0.5]),
         "relu": polarize_run("relu", 0.9, [0.5, 0.5])},
        {"slopes": {"aligned/sink": 0.0, "aligned/diagonal": 0.5, "random/sink": 0.1, "random/diagonal": 0.2}},
        dense=(outcome(2.0, 0.3), outcome(2.5, 0.6)),
    )  # fmt: skip
    board = claims.scoreboard(evidence)
    assert [v.claim for v in board] == list(claims.CLAIMS)
    assert {v.claim: v.status for v in board}["dense_smooths"] == "reproduces"
    assert {v.status for v in board} <= set(claims.STATUSES)


def test_the_cost_section_says_what_its_own_numbers_show() -> None:
    """C3: the page said "why a sink costs less" beside a random sweep where it costs more and stops existing."""

    def point(geometry: str, pattern: str, n_tokens: int, norm: float | None) -> dict:
        return {"geometry": geometry, "pattern": pattern, "n_tokens": n_tokens, "norm": norm}

    result = {"dim": 32, "slopes": {"aligned/sink": 0.03, "aligned/diagonal": 0.49, "random/sink": 0.9,
                                    "random/diagonal": 0.13},
              "points": [point("aligned", "sink", 8, 3.0), point("aligned", "diagonal", 8, 30.0),
                         point("random", "sink", 8, 25.0), point("random", "diagonal", 8, 31.0),
                         point("random", "sink", 64, 182.0), point("random", "diagonal", 64, 52.0),
                         point("random", "sink", 128, None), point("random", "diagonal", 128, 53.0)]}  # fmt: skip
    aligned, random, missing = (m.text("en") for m in cost.explanation(result))
    assert "the sink needs 10x less norm: the sink is the cheaper pattern" in aligned
    assert "At T = 64 the sink needs 3.5x more norm: here the sink costs more" in random
    assert missing.startswith("No sink was found past T = 64 (none at T = 128")
    result["slopes"]["random/sink"] = 0.1  # the sentence follows the numbers, not a script
    assert "cheaper pattern" in cost.explanation(result)[1].text("en")


def with_first_column(sinks: list[float]) -> Trace:
    """A trace whose layers' mean sinks (key_sink[:, 0]) are ``sinks``."""
    found = trace(0.5, [0.0] * (len(sinks) + 1), [])
    key_sink = np.zeros((len(sinks), 3))
    key_sink[:, 0] = sinks
    return dataclasses.replace(found, key_sink=key_sink)


@pytest.mark.parametrize(
    ("sinks", "status"),
    [([0.1, 0.2, 0.6, 0.7] + [0.8] * 12, "reproduces"),  # layer 2 reads what blocks 0 and 1 built
     ([0.1] * 4 + [0.6] * 12, "partly"),  # layer 4 of 16: within the first quarter
     ([0.1] * 8 + [0.6] * 8, "differs"),
     ([0.1] * 16, "not_measured")],
)  # fmt: skip
def test_the_sink_is_built_early_when_the_first_layers_already_sink(sinks: list[float], status: str) -> None:
    verdict = origin_claims.built_early(with_first_column(sinks))
    assert verdict.status == status
    if status in ("partly", "differs"):
        assert f"The sink appears in layer {np.argmax(np.array(sinks) > 0.3)}" in verdict.why.text("en")


def test_ranks_share_their_places_when_tied() -> None:
    np.testing.assert_allclose(origin_claims.ranks(np.array([5.0, 1.0, 5.0, 3.0])), [3.5, 1, 3.5, 2])


def runs(*pairs: tuple[float, int]) -> origins.Secondary:
    """Sink-like runs with (MLP write norm, lifetime)."""
    sinks = tuple(
        origins.SecondarySink(j + 1, "x", 2, 1 + life, 0.2, norm, 0.9) for j, (norm, life) in enumerate(pairs)
    )
    return origins.Secondary(((1, 12),), (3.0, 18.0), sinks)


@pytest.mark.parametrize(
    ("found", "status"),
    [(runs((10.0, 4), (20.0, 6), (30.0, 9)), "reproduces"),
     (runs((10.0, 6), (20.0, 3), (30.0, 4), (40.0, 9), (50.0, 5)), "partly"),  # rank correlation 0.2
     (runs((10.0, 9), (20.0, 6), (30.0, 4)), "differs"),
     (runs((10.0, 9), (20.0, 6)), "not_measured")],
)  # fmt: skip
def test_the_mlp_write_sets_the_lifetime_when_their_ranks_agree(
    found: origins.Secondary, status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(origin_claims, "secondary_sinks", lambda _: found)
    verdict = origin_claims.mlp_lifetime(trace(0.5, [0.0] * 5, []))
    assert verdict.status == status
    if status == "not_measured":
        assert verdict.why.text("en").startswith("2 runs of sink-like states")


def test_a_secondary_sink_reproduces_when_it_takes_more_than_the_typical_key(monkeypatch: pytest.MonkeyPatch) -> None:
    found = runs((10.0, 5))
    monkeypatch.setattr(origin_claims, "secondary_sinks", lambda _: found)
    key_sink = np.full((4, 3), 0.05)
    key_sink[2:, 1] = 0.3  # token 1's column in the layers that read its run (h^2 ..)
    taking = dataclasses.replace(trace(0.5, [0.0] * 5, []), key_sink=key_sink)
    assert origin_claims.secondary_claim(taking).status == "reproduces"
    ignored = dataclasses.replace(taking, key_sink=np.full((4, 3), 0.3))
    assert origin_claims.secondary_claim(ignored).status == "partly"
    monkeypatch.setattr(origin_claims, "secondary_sinks", lambda _: runs())
    assert origin_claims.secondary_claim(taking).status == "differs"


@pytest.mark.parametrize(
    ("bare", "kept", "status"),
    [(4.0, 2.5, "reproduces"),  # the cache hurts (e^4 against e^2), the sinks win most of it back
     (4.0, 3.5, "partly"),  # it hurts, the sinks win back little
     (2.05, 2.0, "differs")],  # a 5% worse cache: nothing to rescue
)  # fmt: skip
def test_a_quantized_cache_needs_its_sinks_when_they_win_back_what_it_lost(
    bare: float, kept: float, status: str
) -> None:
    verdict = claims.from_kv(ClaimRuns(np.full(2, 2.0), np.full(2, bare), np.full(2, kept), 2, 1))
    assert verdict.status == status
    assert claims.from_kv(None).status == "not_measured"


def test_a_rescue_within_the_noise_is_not_graded_as_one() -> None:
    rng = np.random.default_rng(3)
    dense = rng.gamma(2.0, 1.0, 300)
    bare = dense + 1.0
    kept = bare - rng.normal(0.5, 3.0, 300)  # half the added loss back on average, token by token all over
    verdict = claims.from_kv(ClaimRuns(dense, bare, kept, 300, 1))
    assert verdict.status == "partly" and "within the noise" in verdict.why.text("en")


def kv_check(first_kept: float, h2o: float, told: float, change: list[float], policy: float) -> KVCheck:
    """Hand-built evidence: H2O keeping the first token in ``first_kept`` of its caches with mean NLL ``h2o`` (and
    ``told`` with the sinks protected), heads whose restriction adds ``change`` nats to a mean NLL of 2, and a
    policy of mean NLL ``policy``."""
    eviction = Eviction(("h2o", "h2o_sinks"), 8, np.array([[h2o] * 3, [told] * 3]), np.ones((2, 1, 1, 4), bool),
                        np.full((3, 2, 1, 1), -1), np.array([first_kept, 1.0]))  # fmt: skip
    needs = HeadNeeds(8, np.full(3, 2.0), np.array([change]))
    return KVCheck(eviction, needs, DuoPolicy(np.ones((1, 1), bool), np.full(3, policy), 0.25, np.full(3, 2.0)))


@pytest.mark.parametrize(
    ("first_kept", "told", "status"),
    [(0.97, 2.0, "reproduces"),  # kept nearly everywhere; protecting the sinks adds nothing
     (0.97, 1.8, "partly"),  # kept, but protecting the sinks still helps (e^0.2 = 1.22 > 1.1)
     (0.6, 2.0, "differs")],  # dropped in 40% of the caches
)  # fmt: skip
def test_h2o_keeps_the_first_token_when_it_survives_nearly_every_cache(first_kept: float, told: float,
                                                                        status: str) -> None:  # fmt: skip
    verdict = claims.from_h2o(kv_check(first_kept, 2.0, told, [0.0], 2.0))
    assert verdict.status == status
    assert (verdict.why is None) == (status == "reproduces")
    assert claims.from_h2o(None).status == "not_measured"


@pytest.mark.parametrize(
    ("change", "policy", "status"),
    [([0.0, 0.005, 0.5], 2.1, "reproduces"),  # two of three heads under ln(1.01); together e^0.1 = 1.11 of dense
     ([0.0, 0.005, 0.5], 2.5, "partly"),  # together e^0.5 = 1.65 of dense: small costs add up
     ([0.0, 0.02, 0.5], 2.1, "differs")],  # one head of three streams
)  # fmt: skip
def test_most_heads_stream_when_over_half_cost_under_the_threshold_alone(change: list[float], policy: float,
                                                                         status: str) -> None:  # fmt: skip
    verdict = claims.from_heads(kv_check(1.0, 2.0, 2.0, change, policy))
    assert verdict.status == status
    assert claims.from_heads(None).status == "not_measured"


def test_a_verdict_shown_before_every_run_has_landed_is_the_final_one() -> None:
    """Issue 53: the scoreboard draws each verdict as soon as its runs are in; a claim not pending any more never
    changes when the others land, and every claim is pending until its own runs are in."""
    full = claims.Evidence(
        trace(0.8, [0.3, -0.1, -0.2, 0.4, 0.5], [0]), [lab_run("softmax", 0.95)],
        {"softmax": polarize_run("softmax", 0.3, [1.0, 0]), "sigmoid": polarize_run("sigmoid", 0.95, [0.5, 0.5]),
         "relu": polarize_run("relu", 0.9, [0.5, 0.5])},
        {"slopes": {"aligned/sink": 0.0, "aligned/diagonal": 0.5, "random/sink": 0.1, "random/diagonal": 0.2}},
        sensitivity=Spread((3, 6, 9), np.full((8, 3), 2.5)),
        streaming={"dense": 10.0, "window": 60.0, "sinks": 10.5},
        dense=(outcome(2.0, 0.3), outcome(2.5, 0.6)),
        removed=(outcome(2.0), outcome(2.1)),
        kv=ClaimRuns(np.full(2, 2.0), np.full(2, 4.0), np.full(2, 2.5), 2, 1),
        kv_check=kv_check(0.97, 2.0, 2.0, [0.0, 0.005, 0.5], 2.1),
    )  # fmt: skip
    final = {verdict.claim: verdict for verdict in claims.scoreboard(full)}
    order = ("streaming", "kv_check", "removed", "dense", "kv", "sensitivity")  # the page's order, intact in each pair
    for landed in range(len(order) + 1):
        partial = dataclasses.replace(full, **{name: None for name in order[landed:]})
        still = claims.pending(order[:landed])
        for verdict in claims.scoreboard(partial):
            if verdict.claim not in still:  # a pending one the page shows as "measuring…"
                assert verdict == final[verdict.claim], verdict.claim
    assert claims.pending(order) == set() and claims.pending(()) == set(claims.RUNS_OF)
