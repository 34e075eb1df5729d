"""The papers' claims checked on the user's model and text (or on the lab's runs): computed verdicts.

Each check takes data that was already measured and returns a ``Verdict``: reproduces, differs, or
``needs_run`` when the measurement it needs has not been run yet. The thresholds are stated beside each
check; the published numbers and sources live in the catalogues (``claims.<id>.*``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sinkscope.core.capture import Trace
from sinkscope.core.i18n import Message, times
from sinkscope.experiments.interventions import Outcome
from sinkscope.lab.polarization import PolarizeRun
from sinkscope.lab.toy import Finding, TrainingRun, findings

CLAIMS = (
    "softmax_sink", "value_little", "streaming", "plus_one", "half_space", "dense_smooths",
    "sink_cheaper", "polarizes", "sigmoid_flat", "toy_sink", "learned_sink", "gated", "massive_first", "one_token",
)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    claim: str  # one of CLAIMS
    status: str  # "reproduces", "differs" or "needs_run"
    measured: Message | None  # what was measured here, ready to render in any language


def _verdict(claim: str, holds: bool, key: str, **values: object) -> Verdict:
    return Verdict(claim, "reproduces" if holds else "differs", Message.of(key, **values))


def half_space_layers(cosines: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(the layers l of the middle third of depth where bos_cosine(h^l) <= 0, the middle third's cosines)."""
    third = len(cosines) // 3
    middle = cosines[third : len(cosines) - third]
    return [int(layer) + third for layer in np.flatnonzero(middle <= 0)], middle


def half_space(trace: Trace) -> Message:
    """What the scoreboard measures of the half-space condition, for any page that shows it."""
    negative, middle = half_space_layers(trace.layers["bos_cosine"])
    return Message.of("claims.yours.half_space", n=len(negative), of=len(middle), low=round(float(middle.min()), 2))


def from_trace(trace: Trace) -> list[Verdict]:
    """Sink rate above 50% at eps 0.3; sink heads' first value smaller than a typical one (median ratio < 1);
    bos_cosine <= 0 in some middle layer (the middle third of depth); most massive activations on token 0."""
    rate = trace.sink_rate()
    sink_heads = trace.heads["kind"] == "sink"
    ratio = float(np.nanmedian(trace.heads["value_norm_ratio"][sink_heads])) if sink_heads.any() else float("nan")
    negative, middle = half_space_layers(trace.layers["bos_cosine"])
    on_first = sum(token == 0 for _, token, _, _ in trace.massive)
    return [
        _verdict("softmax_sink", rate > 50, "claims.yours.rate", rate=round(rate, 1), n=trace.n_tokens),
        _verdict("value_little", ratio < 1, "claims.yours.value_ratio", ratio=round(ratio, 2)),
        Verdict("half_space", "reproduces" if negative else "differs", half_space(trace)),
        _verdict(
            "massive_first",
            bool(trace.massive) and on_first > len(trace.massive) / 2,
            "claims.yours.massive",
            first=on_first,
            n=len(trace.massive),
            top=round(float(trace.layers["top1"].max())),
        ),  # fmt: skip
    ]


def from_lab(backcopy: list[TrainingRun]) -> list[Verdict]:
    """The shipped (or retrained) Bigram-Backcopy runs: softmax >= 0.9 on BOS at dormant queries, softmax+1 <= 0.1;
    a learned sink logit or an output gate keeps BOS <= 0.1 (``toy.findings``). A variant without runs: needs_run."""
    found = {f.claim: f for f in findings(backcopy)}
    return [_lab_verdict(claim, key, found.get(toy_claim)) for toy_claim, (claim, key) in LAB_CLAIMS.items()]


LAB_CLAIMS = {  # toy.findings' claim -> (the claim here, the catalogue key of what was measured)
    "withhold": ("plus_one", "claims.yours.plus_one"), "sink": ("toy_sink", "claims.yours.toy_sink"),
    "learned": ("learned_sink", "claims.yours.learned_sink"), "gate": ("gated", "claims.yours.gated"),
}  # fmt: skip


def _lab_verdict(claim: str, key: str, found: Finding | None) -> Verdict:
    if found is None:
        return Verdict(claim, "needs_run", None)
    where = {} if found.where is None else {"where": round(found.where, 3)}
    return _verdict(claim, found.holds, key, value=round(found.value, 3), **where)


def from_polarize(runs: Mapping[str, PolarizeRun]) -> list[Verdict]:
    """Softmax's weights end near one-hot (entropy below half its start); sigmoid's stay spread (above 0.8)."""
    softmax, sigmoid = runs["softmax"], runs["sigmoid"]
    return [
        _verdict(
            "polarizes",
            softmax.polarized(),
            "claims.yours.entropy",
            start=round(softmax.entropy[0], 2),
            end=round(softmax.entropy[-1], 2),
        ),  # fmt: skip
        _verdict(
            "sigmoid_flat",
            sigmoid.entropy[-1] > 0.8,
            "claims.yours.entropy",
            start=round(sigmoid.entropy[0], 2),
            end=round(sigmoid.entropy[-1], 2),
        ),  # fmt: skip
    ]


def from_cost(cost: Mapping[str, object]) -> Verdict:
    """Aligned embeddings: the sink's norm grows more slowly with T than the diagonal's (its slope is lower)."""
    found = {name: np.nan if value is None else float(value) for name, value in cost["slopes"].items()}
    sink, diagonal = found["aligned/sink"], found["aligned/diagonal"]  # JSON writes a slope never found as null
    return _verdict("sink_cheaper", bool(sink < diagonal), "claims.yours.cost", sink=round(sink, 2),
                    diagonal=round(diagonal, 2))  # fmt: skip


def from_sensitivity(kl: Mapping[int, float] | None) -> Verdict:
    """Nudging token 0 moves later predictions more than nudging another token by the same distance."""
    if kl is None:
        return Verdict("one_token", "needs_run", None)
    first, other = kl.values()
    return _verdict("one_token", first > other, "claims.yours.kl", ratio=times(first / other if other else math.inf))


def from_streaming(ppl: Mapping[str, float] | None) -> Verdict:
    """4 sinks + a window stay within 25% of dense perplexity while the window alone is at least twice as bad."""
    if ppl is None:
        return Verdict("streaming", "needs_run", None)
    holds = ppl["sinks"] <= 1.25 * ppl["dense"] and ppl["window"] >= 2 * ppl["dense"]
    return _verdict("streaming", holds, "claims.yours.streaming", dense=round(ppl["dense"], 2),
                    window=round(ppl["window"], 2), sinks=round(ppl["sinks"], 2))  # fmt: skip


def from_dense(intact: Outcome | None, dense: Outcome | None) -> Verdict:
    """Every head made uniform raises the scaled token cosine, averaged over depth."""
    if intact is None or dense is None:
        return Verdict("dense_smooths", "needs_run", None)
    before, after = float(np.nanmean(intact.token_cosine_scaled)), float(np.nanmean(dense.token_cosine_scaled))
    return _verdict("dense_smooths", after > before, "claims.yours.dense", before=round(before, 3),
                    after=round(after, 3))  # fmt: skip


def scoreboard(
    trace: Trace, backcopy: list[TrainingRun], polarize: Mapping[str, PolarizeRun], cost: Mapping[str, object],
    sensitivity: Mapping[int, float] | None = None, streaming: Mapping[str, float] | None = None,
    dense: tuple[Outcome, Outcome] | None = None,
) -> list[Verdict]:  # fmt: skip
    """Every claim in the order of CLAIMS."""
    found = [*from_trace(trace), *from_lab(backcopy), *from_polarize(polarize), from_cost(cost)]
    found += [from_sensitivity(sensitivity), from_streaming(streaming), from_dense(*(dense or (None, None)))]
    by_claim = {verdict.claim: verdict for verdict in found}
    return [by_claim[claim] for claim in CLAIMS]
