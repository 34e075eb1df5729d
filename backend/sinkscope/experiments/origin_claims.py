"""The claims about where sinks are made, checked on one analysis (no run of their own): secondary sinks exist here
(Wong et al. 2025), the first token's sink is built in the first blocks (arXiv 2603.06591), and the MLP write that
makes a secondary sink sets how long it lives (Wong et al.)."""

from __future__ import annotations

import numpy as np

from sinkscope.core.capture import Trace
from sinkscope.core.i18n import Message, states
from sinkscope.experiments.verdicts import Verdict, graded
from sinkscope.findings.origins import SecondarySink, secondary_sinks, sink_phases

FIRST_BLOCKS = 2  # the paper's "first two blocks": a sink that layer 2 already reads was built by blocks 0 and 1
DEPTH_SHARE = 1 / 4  # "early" for the partial verdict: a sink first read within the first quarter of depth
CORRELATES = 0.5  # a rank correlation over this: the MLP write's norm sets the lifetime
FEWEST_RUNS = 3  # a rank correlation of fewer runs says nothing


def from_origins(trace: Trace) -> list[Verdict]:
    return [secondary_claim(trace), built_early(trace), mlp_lifetime(trace)]


def receives_more(trace: Trace, sink: SecondarySink) -> bool:
    """Whether the sink takes more attention than the typical key past the first, in the layers that read it."""
    layers = trace.key_sink[sink.first : sink.last + 1, 1:]
    return bool(np.isfinite(layers).any() and sink.key_sink > np.nanmedian(layers))


def secondary_claim(trace: Trace) -> Verdict:
    """A secondary sink within the rescaled lifetime bounds (reproduces when it also takes more attention than the
    typical key, partly when not)."""
    found = secondary_sinks(trace)
    spans = states(found.raised)
    evidence = Message.of("claims.evidence.secondary", runs=len(found.sinks), tokens=trace.n_tokens, spans=spans)
    if not found.within:
        measured = Message.of("claims.yours.no_secondary", runs=len(found.sinks))
        return graded("secondary_sinks", 0, 2, measured, evidence, Message.of("claims.why.no_secondary"))
    best = found.within[0]
    measured = Message.of("claims.yours.secondary", n=len(found.within), token=repr(best.token), position=best.position,
                          first=best.first, last=best.last, share=round(best.key_sink, 2), tied=found.tied)  # fmt: skip
    why = Message.of("claims.why.secondary_ignored", token=repr(best.token))
    return graded("secondary_sinks", 1 + receives_more(trace, best), 2, measured, evidence, why)


def built_early(trace: Trace) -> Verdict:
    """The first layer that sinks (``sink_phases``) reads a state built by the first two blocks (reproduces), within
    the first quarter of depth (partly), or later (differs); the measurement names every phase of the sink."""
    phases = sink_phases(trace)
    if phases.onset is None:
        return Verdict("sink_built_early", "not_measured", None, None, Message.of("claims.why.no_sink_layer"))
    layer, per_layer = phases.onset, trace.key_sink[:, 0]  # (layer,): each layer's mean sink
    early = layer <= len(per_layer) * DEPTH_SHARE
    measured = phases.said()
    evidence = Message.of("claims.evidence.built_early", layers=len(per_layer), heads=trace.shape[1])
    quarter = int(len(per_layer) * DEPTH_SHARE)
    why = Message.of("claims.why.built_early", layer=layer, blocks=FIRST_BLOCKS, quarter=quarter)
    return graded("sink_built_early", int(layer <= FIRST_BLOCKS) + int(early), 2, measured, evidence, why)


def ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their places), for a Spearman correlation."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)  # the last place (1-based) of each distinct value
    return (ends - (counts - 1) / 2)[inverse]


def mlp_lifetime(trace: Trace) -> Verdict:
    """Over the runs of sink-like states, the rank correlation of the MLP write that made each with its lifetime:
    over CORRELATES reproduces, above 0 partly; fewer than FEWEST_RUNS runs, not measured."""
    found = [sink for sink in secondary_sinks(trace).sinks if np.isfinite(sink.mlp_norm)]
    if len(found) < FEWEST_RUNS:
        why = Message.of("claims.why.few_runs", runs=len(found), fewest=FEWEST_RUNS)
        return Verdict("mlp_lifetime", "not_measured", None, None, why)
    norms = np.array([sink.mlp_norm for sink in found])
    lives = np.array([sink.lifetime for sink in found], dtype=float)
    a, b = ranks(norms), ranks(lives)
    spread = a.std() * b.std()
    rho = float(((a - a.mean()) * (b - b.mean())).mean() / spread) if spread else 0.0  # Spearman's rank correlation
    measured = Message.of("claims.yours.mlp_lifetime", rho=round(rho, 2), runs=len(found))
    evidence = Message.of("claims.evidence.mlp_lifetime", runs=len(found), low=int(lives.min()), high=int(lives.max()))
    why = Message.of("claims.why.mlp_lifetime", rho=round(rho, 2), correlates=CORRELATES)
    return graded("mlp_lifetime", int(rho > CORRELATES) + int(rho > 0), 2, measured, evidence, why)
