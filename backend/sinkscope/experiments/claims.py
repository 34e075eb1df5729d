"""The papers' claims checked on the user's model and text (or on the lab's runs): computed verdicts.

Each check takes data that was already measured and returns a ``Verdict``: reproduces, partly (the evidence
agrees on one part and not on another), differs, or not measured (the run it needs is missing, or no run of
its variant learned its task). Each verdict carries what was measured, the evidence it rests on and, when it
is partly or differs, one sentence of why. Thresholds are stated beside each check; the published numbers and
sources live in the catalogues (``claims.<id>.*``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from sinkscope.core.capture import Trace
from sinkscope.core.i18n import VARIANT_KEYS, Message, times
from sinkscope.core.loss import LEVEL, mean_difference, perplexity
from sinkscope.core.names import DEFAULT_EPS, STATUSES
from sinkscope.experiments import cost, kv_check
from sinkscope.experiments.interventions import DROP_FROM, Outcome
from sinkscope.experiments.kv_check import KVCheck
from sinkscope.experiments.kv_quant import CLAIM_BITS, CLAIM_TOKENS, ClaimRuns, won_back_interval
from sinkscope.experiments.nudges import DIRECTIONS, QUARTERS, SPREAD, Spread
from sinkscope.experiments.origin_claims import CORRELATES, FIRST_BLOCKS, from_origins
from sinkscope.experiments.stream_plan import check_values
from sinkscope.experiments.verdicts import Verdict, graded
from sinkscope.findings import words
from sinkscope.findings.heads import sink_reading
from sinkscope.findings.words import EXPLODES, LITTLE_WORSE, NEEDS_CONTEXT, READS
from sinkscope.lab.polarization import PolarizeRun
from sinkscope.lab.toy import LEARNED, SILENT, SINK, Finding, TrainingRun, findings

CLAIMS = (
    "softmax_sink", "value_little", "streaming", "plus_one", "half_space", "dense_smooths",
    "sink_cheaper", "polarizes", "sigmoid_flat", "toy_sink", "learned_sink", "gated", "massive_first", "one_token",
    "secondary_sinks", "sink_built_early", "mlp_lifetime", "kv_sinks", "h2o_first", "heads_stream",
)  # fmt: skip
__all__ = ["CLAIMS", "STATUSES", "Evidence", "Verdict", "how", "scoreboard"]
RATE_HOLDS, RATE_PARTLY = 50.0, 25.0  # sink rate (%) above which the claim reproduces, or partly does
STREAM_NEAR = 1.25  # sinks + window within 25% of dense perplexity keep streaming "near dense"
RECOVERS = 1 / 2  # keeping the sinks "rescues" a quantized cache when it wins back over half of what it lost
KEEPS_FIRST = 0.9  # H2O "keeps the first token" when over 90% of its full caches hold it
MOST = 1 / 2  # "most heads": over half
SIGMOID_SPREAD = 0.8  # a sigmoid run whose final entropy stays above 0.8 did not polarize


def _said(key: str, **values: object) -> Message:
    return Message.of(key, **values)


def half_space_layers(cosines: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(the layers l of the middle third of depth where bos_cosine(h^l) <= 0, the middle third's cosines)."""
    third = len(cosines) // 3
    middle = cosines[third : len(cosines) - third]
    return [int(layer) + third for layer in np.flatnonzero(middle <= 0)], middle


def half_space(trace: Trace) -> Message:
    """What the scoreboard measures of the half-space condition, for any page that shows it."""
    negative, middle = half_space_layers(trace.layers["bos_cosine"])
    return _said("claims.yours.half_space", n=len(negative), of=len(middle), low=round(float(middle.min()), 2))


def from_trace(trace: Trace, removed: tuple[Outcome, Outcome] | None = None) -> list[Verdict]:
    """Sink rate above 50% at eps 0.3 (partly above 25%); the sink heads' first value smaller than a typical one,
    with at most half of them reading over half their output from it; bos_cosine <= 0 in most layers of the
    middle third of depth (partly: in some); massive activations mostly on token 0 (partly: some)."""
    rate, heads = trace.sink_rate(), int(np.prod(trace.shape))
    on_text = _said("claims.evidence.trace", heads=heads, n=trace.n_tokens)
    negative, middle = half_space_layers(trace.layers["bos_cosine"])
    third = len(trace.layers["bos_cosine"]) // 3
    on_first = sum(token == 0 for _, token, _, _ in trace.massive)
    return [
        graded(
            "softmax_sink",
            int(rate > RATE_HOLDS) + int(rate > RATE_PARTLY),
            2,
            _said("claims.yours.rate", rate=round(rate, 1), n=trace.n_tokens, eps=DEFAULT_EPS),
            on_text,
            _said("claims.why.softmax_sink", rate=round(rate, 1), eps=DEFAULT_EPS, holds=RATE_HOLDS),
        ),  # fmt: skip
        value_little(trace, removed),
        graded(
            "half_space",
            int(len(negative) > len(middle) / 2) + int(bool(negative)),
            2,
            half_space(trace),
            _said("claims.evidence.half_space", first=third, last=third + len(middle) - 1),
            _said("claims.why.half_space", n=len(negative), of=len(middle)),
        ),  # fmt: skip
        graded(
            "massive_first",
            int(on_first > len(trace.massive) / 2) + int(on_first > 0),
            2,
            _said(
                "claims.yours.massive",
                first=on_first,
                n=len(trace.massive),
                top=round(float(trace.layers["top1"].max())),
            ),
            on_text,
            _said("claims.why.massive_first", first=on_first, n=len(trace.massive)),
        ),  # fmt: skip
    ]


def value_little(trace: Trace, removed: tuple[Outcome, Outcome] | None) -> Verdict:
    """Two claims shown side by side: the sink reads little (its value is small: the verdict) and what removing
    the first key costs the model (the evidence; removing a key that reads nothing can still cost a lot)."""
    found = sink_reading(trace.heads)
    if not found.sinks:
        return Verdict("value_little", "not_measured", None, None, _said("claims.why.no_sink_heads"))
    measured = _said("claims.yours.value_ratio", ratio=round(found.value_ratio, 2), reading=found.reading,
                     sinks=found.sinks, reads=READS)  # fmt: skip
    if removed is None:
        evidence = _said("claims.evidence.value_unrun")
    else:
        intact, dropped = removed
        evidence = _said("claims.evidence.value_removed", nats=round(dropped.loss - intact.loss, 2), first=DROP_FROM)
    small = found.value_ratio < 1
    holding = int(small) + int(small and words.share_word(found.reading, found.sinks) != "most")
    return graded("value_little", holding, 2, measured, evidence,
                  _said("claims.why.value_little", reading=found.reading, sinks=found.sinks, reads=READS))  # fmt: skip


LAB_CLAIMS = {  # toy.findings' claim -> (the claim here, the variant it trains, what was measured, why it may differ)
    "withhold": ("plus_one", "softmax+1", "claims.yours.plus_one", "claims.why.plus_one"),
    "sink": ("toy_sink", "softmax", "claims.yours.toy_sink", "claims.why.toy_sink"),
    "learned": ("learned_sink", "sink-logit", "claims.yours.learned_sink", "claims.why.learned_sink"),
    "gate": ("gated", "gated", "claims.yours.gated", "claims.why.gated"),
}


def from_lab(backcopy: list[TrainingRun]) -> list[Verdict]:
    """The shipped (or retrained) Bigram-Backcopy runs that learned their task (``toy.findings``); a variant with
    no run, or with no run that learned, is not measured."""
    found = {f.claim: f for f in findings(backcopy)}
    return [_lab_verdict(*keys, found.get(toy_claim), [r for r in backcopy if r.variant == keys[1]])
            for toy_claim, keys in LAB_CLAIMS.items()]  # fmt: skip


def _lab_verdict(
    claim: str, variant: str, key: str, why: str, found: Finding | None, runs: list[TrainingRun]
) -> Verdict:
    learned = sum(run.learned() for run in runs)
    evidence = _said("claims.evidence.lab", variant=Message.of(VARIANT_KEYS[variant]), learned=learned,
                     runs=len(runs), threshold=LEARNED)  # fmt: skip
    if found is None:
        why = _said("claims.why.lab_untrained" if not runs else "claims.why.lab_not_learned", variant=variant)
        return Verdict(claim, "not_measured", None, evidence, why)
    seed, layer, head = found.source
    where = {} if found.where is None else {"where": round(found.where, 3)}
    measured = _said(key, value=round(found.value, 3), seed=seed, layer=layer, head=head, **where)
    return graded(claim, int(found.holds), 1, measured, evidence, _said(why, sink=SINK, silent=SILENT, **where))


def from_polarize(runs: Mapping[str, PolarizeRun]) -> list[Verdict]:
    """Softmax's weights end near one-hot (entropy below half its start); sigmoid's and ReLU's stay spread (final
    entropy above 0.8 for sigmoid; ReLU's run not polarized). A ReLU run that ends one-hot because its units died
    (a negative score gets no gradient) is reported as such: that is not the polarizing term at work."""
    softmax, sigmoid, relu = runs["softmax"], runs["sigmoid"], runs["relu"]
    steps = int(softmax.settings.get("steps", len(softmax.entropy)))
    evidence = _said("claims.evidence.polarize", steps=steps, candidates=len(softmax.weights[-1]))
    polarizes = graded("polarizes", int(softmax.polarized()), 1, _entropy(softmax), evidence,
                       _said("claims.why.polarizes"))  # fmt: skip
    measured = _said("claims.yours.flat", sigmoid=_entropy(sigmoid), relu=_entropy(relu), dead=relu.dead(),
                     n=len(relu.weights[-1]))  # fmt: skip
    flat = int(sigmoid.entropy[-1] > SIGMOID_SPREAD) + int(not relu.polarized())
    why = _said("claims.why.relu_dead" if relu.dead() else "claims.why.sigmoid_flat", dead=relu.dead())
    return [polarizes, graded("sigmoid_flat", flat, 2, measured, evidence, why)]


def _entropy(run: PolarizeRun) -> Message:
    return _said("claims.yours.entropy", start=round(run.entropy[0], 2), end=round(run.entropy[-1], 2))


def from_cost(result: Mapping[str, object]) -> Verdict:
    """The sink's norm grows more slowly with T than the diagonal's (``cost.cheaper``: a slope lower by more than
    ``words.SAME_RATIO``), with aligned embeddings and with random ones; a slope never found does not count."""
    found = {name: np.nan if value is None else float(value) for name, value in result["slopes"].items()}
    lengths = sorted({int(point["n_tokens"]) for point in result.get("points", [])}) or [0]
    measured = _said("claims.yours.cost", **{f"{name.replace('/', '_')}": round(value, 2)
                                             for name, value in found.items()})  # fmt: skip
    evidence = _said("claims.evidence.cost", low=lengths[0], high=lengths[-1])
    cheaper = {geometry: word == "sink" for geometry, word in cost.cheaper(dict(result)).items()}
    why = _said("claims.why.cost_random" if cheaper["aligned"] else "claims.why.cost_aligned")
    return graded("sink_cheaper", sum(cheaper.values()), 2, measured, evidence, why)


def from_sensitivity(spread: Spread | None) -> Verdict:
    """Nudging token 0 moves later predictions more than nudging another token by the same distance: in 90% of
    random directions and positions (reproduces), in the median only (partly), or not (differs)."""
    if spread is None:
        return Verdict("one_token", "not_measured", None)
    low, high = spread.interval()
    median = spread.median()
    measured = _said("claims.yours.kl", ratio=times(median))
    evidence = _said("claims.evidence.kl", directions=spread.ratios.shape[0], share=spread.share,
                     positions=", ".join(map(str, spread.positions)), low=times(low), high=times(high))  # fmt: skip
    return graded("one_token", int(median > 1) + int(low > 1), 2, measured, evidence,
                  _said("claims.why.one_token" if median > 1 else "claims.why.one_token_less"))  # fmt: skip


def from_streaming(ppl: Mapping[str, float] | None) -> Verdict:
    """4 sinks + a window stay within 25% of dense perplexity, and the window alone is at least twice as bad."""
    if ppl is None:
        return Verdict("streaming", "not_measured", None)
    sinks_close, window_bad = ppl["sinks"] <= STREAM_NEAR * ppl["dense"], ppl["window"] >= EXPLODES * ppl["dense"]
    sizes = check_values()
    measured = _said("claims.yours.streaming", dense=round(ppl["dense"], 2), window=round(ppl["window"], 2),
                     sinks_ppl=round(ppl["sinks"], 2), sinks=sizes["sinks"], window_size=sizes["window"],
                     cache=sizes["cache"], tokens=sizes["tokens"])  # fmt: skip
    evidence = _said("claims.evidence.streaming", over=round(100 * (ppl["sinks"] / ppl["dense"] - 1)),
                     window=times(ppl["window"] / ppl["dense"]), near=round(100 * (STREAM_NEAR - 1)),
                     collapse=times(EXPLODES), sinks=sizes["sinks"])  # fmt: skip
    why = _said("claims.why.streaming_window" if not window_bad else "claims.why.streaming_sinks",
                near=round(100 * (STREAM_NEAR - 1)), sinks=sizes["sinks"])  # fmt: skip
    return graded("streaming", int(sinks_close) + int(window_bad), 2, measured, evidence, why)


def from_dense(intact: Outcome | None, dense: Outcome | None) -> Verdict:
    """Every head made uniform raises the scaled token cosine, averaged over depth."""
    if intact is None or dense is None:
        return Verdict("dense_smooths", "not_measured", None)
    before, after = float(np.nanmean(intact.token_cosine_scaled)), float(np.nanmean(dense.token_cosine_scaled))
    measured = _said("claims.yours.dense", before=round(before, 3), after=round(after, 3))
    evidence = _said("claims.evidence.dense", layers=len(intact.token_cosine_scaled))
    return graded("dense_smooths", int(after > before), 1, measured, evidence, _said("claims.why.dense_smooths"))


def from_kv(kv: ClaimRuns | None) -> Verdict:
    """A 2-bit cache costs perplexity (at least LITTLE_WORSE against the float cache), and keeping the detected
    sinks in full precision wins back over half of the loss it adds (nats per token), each across its bootstrap
    interval over the tokens of the visitor's text and the built-in ones pooled with it."""
    if kv is None:
        return Verdict("kv_sinks", "not_measured", None)
    dense, bare, kept = (perplexity(nll) for nll in (kv.dense, kv.bare, kv.kept))
    hurts = math.exp(mean_difference(kv.bare, kv.dense).low) >= LITTLE_WORSE  # the whole interval of the ratio
    back = won_back_interval(kv.dense, kv.bare, kv.kept)
    rescued = back.low > RECOVERS
    measured = _said("claims.yours.kv_sinks", bits=CLAIM_BITS, dense=round(dense, 1), bare=round(bare, 1),
                     kept=round(kept, 1), back=round(100 * back.value), low=round(100 * back.low),
                     high=round(100 * back.high), level=round(100 * LEVEL))  # fmt: skip
    evidence = _said("claims.evidence.kv_sinks", n=kv.own + 1, others=kv.texts - 1, tokens=CLAIM_TOKENS,
                     bits=CLAIM_BITS)  # fmt: skip
    noise = not back.excludes(RECOVERS)  # the interval straddles the threshold: this text cannot tell
    why = "claims.why.kv_unhurt" if not hurts else "claims.why.kv_noise" if noise else "claims.why.kv_sinks"
    why_said = _said(why, little=LITTLE_WORSE, recovers=round(100 * RECOVERS), level=round(100 * LEVEL))
    return graded("kv_sinks", int(hurts) + int(hurts and rescued), 2, measured, evidence, why_said)


def from_h2o(found: KVCheck | None) -> Verdict:
    """H2O, never told about sinks, keeps the first token in over KEEPS_FIRST of its full caches, and telling it
    (the first tokens never evicted) improves its perplexity by less than LITTLE_WORSE."""
    if found is None:
        return Verdict("h2o_first", "not_measured", None)
    evicted = found.eviction
    alone, protected = (evicted.policies.index(policy) for policy in ("h2o", "h2o_sinks"))
    share, h2o, told = float(evicted.first_kept[alone]), evicted.perplexity(alone), evicted.perplexity(protected)
    keeps, little = share > KEEPS_FIRST, h2o < LITTLE_WORSE * told
    measured = _said("claims.yours.h2o_first", share=round(100 * share, 1), h2o=round(h2o, 2), told=round(told, 2),
                     **kv_check.values())  # fmt: skip
    evidence = _said("claims.evidence.h2o_first", **kv_check.values())
    why = _said("claims.why.h2o_first" if not keeps else "claims.why.h2o_told", keeps=round(100 * KEEPS_FIRST),
                little=LITTLE_WORSE)  # fmt: skip
    return graded("h2o_first", int(keeps) + int(keeps and little), 2, measured, evidence, why)


def from_heads(found: KVCheck | None) -> Verdict:
    """Over half of the heads, restricted alone to sinks + window, raise perplexity by at most NEEDS_CONTEXT; and
    DuoAttention's policy (all of them restricted at once) stays within STREAM_NEAR of dense perplexity."""
    if found is None:
        return Verdict("heads_stream", "not_measured", None)
    share, dense, policy = found.needs.streaming_share(), found.policy.dense_perplexity, found.policy.perplexity
    most, near = share > MOST, policy <= STREAM_NEAR * dense
    held = round(100 * found.policy.cache_share)
    measured = _said("claims.yours.heads_stream", share=round(100 * share), dense=round(dense, 2),
                     policy=round(policy, 2), held=held)  # fmt: skip
    evidence = _said("claims.evidence.heads_stream", heads=found.needs.change.size, **kv_check.values())
    why = _said("claims.why.heads_stream" if not most else "claims.why.heads_together",
                rise=round(100 * NEEDS_CONTEXT), near=round(100 * (STREAM_NEAR - 1)))  # fmt: skip
    return graded("heads_stream", int(most) + int(most and near), 2, measured, evidence, why)


@dataclass(frozen=True)
class Evidence:
    """Everything the scoreboard reads; a run that could not be made is None and its claim is not measured."""

    trace: Trace
    backcopy: list[TrainingRun]
    polarize: Mapping[str, PolarizeRun]
    cost: Mapping[str, object]
    sensitivity: Spread | None = None
    streaming: Mapping[str, float] | None = None
    dense: tuple[Outcome, Outcome] | None = None  # (intact, every head uniform)
    removed: tuple[Outcome, Outcome] | None = None  # (intact, interventions.default_drop: layers DROP_FROM ..)
    kv: ClaimRuns | None = None  # the float cache and a 2-bit cache with nothing, and the sinks, kept
    kv_check: KVCheck | None = None  # H2O and the per-head map on Python's help (``kv_check``)


def how() -> Message:
    """How the verdicts are decided, every threshold filled from where it is defined."""
    return _said("claims.how", learned=LEARNED, holds=RATE_HOLDS, partly=RATE_PARTLY, eps=DEFAULT_EPS,
                 near=round(100 * (STREAM_NEAR - 1)), collapse=times(EXPLODES), sink=SINK, silent=SILENT,
                 spread=SIGMOID_SPREAD, above=100 - SPREAD[0], directions=DIRECTIONS, positions=len(QUARTERS),
                 blocks=FIRST_BLOCKS, correlates=CORRELATES, bits=CLAIM_BITS, little=LITTLE_WORSE,
                 recovers=round(100 * RECOVERS), keeps=round(100 * KEEPS_FIRST), rise=round(100 * NEEDS_CONTEXT),
                 kv_tokens=kv_check.TOKENS, kv_cache=kv_check.BUDGET, **check_values())  # fmt: skip


RUNS_OF = {  # claim -> the Evidence runs its verdict reads (every other claim reads the trace and shipped results)
    "value_little": ("removed",),
    "dense_smooths": ("dense",),
    "one_token": ("sensitivity",),
    "streaming": ("streaming",),
    "kv_sinks": ("kv",),
    "h2o_first": ("kv_check",),
    "heads_stream": ("kv_check",),
}


def pending(landed: Collection[str]) -> set[str]:
    """The claims whose runs have not all ``landed`` yet (by Evidence field): their verdicts are still to come."""
    return {claim for claim, runs in RUNS_OF.items() if not set(runs) <= set(landed)}


def scoreboard(evidence: Evidence) -> list[Verdict]:
    """Every claim in the order of CLAIMS."""
    found = [*from_trace(evidence.trace, evidence.removed), *from_lab(evidence.backcopy),
             *from_polarize(evidence.polarize), from_cost(evidence.cost), from_sensitivity(evidence.sensitivity),
             from_streaming(evidence.streaming), from_dense(*(evidence.dense or (None, None))),
             *from_origins(evidence.trace), from_kv(evidence.kv), from_h2o(evidence.kv_check),
             from_heads(evidence.kv_check)]  # fmt: skip
    by_claim = {verdict.claim: verdict for verdict in found}
    return [by_claim[claim] for claim in CLAIMS]
