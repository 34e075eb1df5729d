"""The scoreboard's verdicts follow the numbers they are given (hand-built inputs, no model)."""

from __future__ import annotations

import numpy as np
import pytest
from sinkscope.core.capture import Trace
from sinkscope.experiments import claims
from sinkscope.lab.polarization import PolarizeRun


def trace(sink: float, bos_cosine: list[float], massive_tokens: list[int]) -> Trace:
    """Four layers of two heads, all alike; ``bos_cosine`` per h^0 .. h^4."""
    heads = {name: np.full((4, 2), value) for name, value in (("sink", sink), ("value_norm_ratio", 0.2))}
    heads["kind"] = np.full((4, 2), "sink" if sink >= 0.5 else "mixed", dtype=object)
    layers = {"bos_cosine": np.array(bos_cosine), "top1": np.full(5, 900.0)}
    massive = tuple((2, token, 7, 900.0) for token in massive_tokens)
    return Trace("m", (1, 2, 3), ("a", "b", "c"), heads, layers, massive, np.zeros((5, 3, 4)), np.zeros((4, 2, 3)))


def test_trace_claims_follow_their_thresholds() -> None:
    sinking = {v.claim: v for v in claims.from_trace(trace(0.8, [0.3, -0.1, 0.2, 0.4, 0.5], [0, 0, 3]))}
    assert {c: v.status for c, v in sinking.items()} == dict.fromkeys(sinking, "reproduces")
    assert dict(sinking["half_space"].measured.params) == {"n": 1, "of": 3, "low": -0.1}
    flat = {v.claim: v for v in claims.from_trace(trace(0.1, [0.3, 0.1, 0.2, -0.4, 0.5], [3]))}
    assert flat["softmax_sink"].status == "differs" and flat["massive_first"].status == "differs"
    assert flat["half_space"].status == "reproduces"  # layer 3 is in the middle third of h^0 .. h^4


@pytest.mark.parametrize(
    ("ppl", "status"),
    [({"dense": 10.0, "window": 40.0, "sinks": 12.0}, "reproduces"),
     ({"dense": 10.0, "window": 40.0, "sinks": 13.0}, "differs"),  # more than 25% above dense
     ({"dense": 10.0, "window": 15.0, "sinks": 10.5}, "differs")],  # the window alone never collapsed
)  # fmt: skip
def test_streaming_needs_sinks_near_dense_and_a_collapsing_window(ppl: dict, status: str) -> None:
    assert claims.from_streaming(ppl).status == status


def test_a_missing_run_says_so_instead_of_guessing() -> None:
    assert claims.from_streaming(None).status == "needs_run" and claims.from_sensitivity(None).measured is None
    assert claims.from_dense(None, None).status == "needs_run"


def test_cost_compares_the_slopes_and_a_slope_never_found_differs() -> None:
    cheaper = {"slopes": {"aligned/sink": 0.0, "aligned/diagonal": 0.5}}
    assert claims.from_cost(cheaper).status == "reproduces"  # a flat sink still counts: 0.0 is a slope
    unknown = {"slopes": {"aligned/sink": None, "aligned/diagonal": 0.5}}
    assert claims.from_cost(unknown).status == "differs"


def test_polarization_and_sensitivity() -> None:
    runs = {"softmax": PolarizeRun("softmax", "logistic", entropy=[1.0, 0.3]),
            "sigmoid": PolarizeRun("sigmoid", "logistic", entropy=[1.0, 0.95])}  # fmt: skip
    assert [v.status for v in claims.from_polarize(runs)] == ["reproduces", "reproduces"]
    assert claims.from_sensitivity({0: 0.2, 5: 0.1}).status == "reproduces"
    assert claims.from_sensitivity({0: 0.1, 5: 0.2}).status == "differs"


def test_lab_claims_come_from_the_runs_given_and_a_variant_never_trained_needs_a_run() -> None:
    from sinkscope.lab.toy import TrainingRun

    def run(variant: str, bos: float, total: float = 1.0, gate: float = 1.0) -> TrainingRun:
        return TrainingRun("backcopy", variant, 0, accuracy=[1.0], bos_dormant=[[[bos]]], total_dormant=[[[total]]],
                           gate_dormant=[[[gate]]])  # fmt: skip

    verdicts = {v.claim: v for v in claims.from_lab([run("softmax", 0.95), run("softmax+1", 0.02, 0.1)])}
    assert verdicts["toy_sink"].status == "reproduces" and verdicts["plus_one"].status == "reproduces"
    assert verdicts["learned_sink"].status == "needs_run" and verdicts["gated"].status == "needs_run"
    gated = {v.claim: v for v in claims.from_lab([run("softmax", 0.95), run("gated", 0.4, gate=0.02)])}
    assert gated["gated"].status == "differs"
    assert dict(gated["gated"].measured.params) == {"value": 0.4, "where": 0.02}
