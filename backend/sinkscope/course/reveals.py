"""What holds on the learner's model for each step of the course: the choice that is true, and why, in numbers.

Each function takes data the pages already measure (a Trace, two Outcomes, the streaming perplexities, the cost
sweep, the scoreboard's verdicts) and returns a ``Reveal``; the sentences are catalogue keys with parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sinkscope.core.capture import Trace
from sinkscope.core.i18n import Message, times
from sinkscope.core.names import Kind
from sinkscope.course.steps import Reveal
from sinkscope.experiments import cost
from sinkscope.experiments.claims import STATUSES, Verdict
from sinkscope.experiments.interventions import Outcome
from sinkscope.plot.slides import strongest

KIND_CHOICE = {Kind.SINK: "first", Kind.PREVIOUS_TOKEN: "previous", Kind.DIAGONAL: "itself", Kind.MIXED: "spread"}
SAME_RATIO = 1.25  # two numbers within 25% of each other count as "about the same"
LEARNED_MASS = 0.01  # a learned sink logit that takes more than 1% of a row on average makes rows sum below one
BARELY, A_LOT = 0.1, 1.0  # nats of loss: below BARELY barely changes, above A_LOT changes a lot
EXPLODES = 2.0  # evicting the sinks at least doubles perplexity: it explodes


def _share(kinds: np.ndarray, kind: str) -> float:
    return round(100 * float((kinds == kind).mean()), 1)


def _about(a: float, b: float, larger: str, smaller: str) -> str:
    """``larger`` when a is clearly above b, ``smaller`` when clearly below, else "same"."""
    if a > SAME_RATIO * b:
        return larger
    return smaller if b > SAME_RATIO * a else "same"


def of_map(trace: Trace) -> Reveal:
    """Which key most heads look at: the most common kind of head."""
    kinds = trace.heads["kind"]
    shares = {kind: _share(kinds, kind) for kind in KIND_CHOICE}
    truth = KIND_CHOICE[max(shares, key=shares.get)]
    said = Message.of("course.map.said", heads=kinds.size, token=trace.tokens[0], sink=shares[Kind.SINK],
                      diagonal=shares[Kind.DIAGONAL], previous=shares[Kind.PREVIOUS_TOKEN],
                      mixed=shares[Kind.MIXED])  # fmt: skip
    rate = Message.of("course.map.rate", rate=round(trace.sink_rate(), 1), n=trace.n_tokens)
    return Reveal(truth, (said, rate))


def of_budget(trace: Trace) -> Reveal:
    """A softmax row spends one unit; a learned sink logit (gpt-oss) keeps some of it off the real keys."""
    layer, head = strongest(trace.heads, "sink")
    weight = round(100 * float(trace.heads["sink"][layer, head]), 1)
    names = Message.of("course.budget.said", layer=layer, head=head, weight=weight, token=trace.tokens[0])
    learned = float(np.nanmean(trace.heads["learned_sink"]))
    if trace.learned_sinks and learned > LEARNED_MASS:
        return Reveal("less", (Message.of("course.budget.learned", mass=round(100 * learned, 1)), names))
    return Reveal("one", (Message.of("course.budget.rows_one"), names))


def of_reads(trace: Trace) -> Reveal:
    """The sink heads' first value against a typical one (median ratio), and how many still read it."""
    sinks = trace.heads["kind"] == Kind.SINK
    if not sinks.any():
        return Reveal("same", (Message.of("course.reads.no_sinks"),))
    ratio = float(np.nanmedian(trace.heads["value_norm_ratio"][sinks]))
    reading = int((trace.heads["value_sink"][sinks] > 0.5).sum())
    said = Message.of("course.reads.said", n=int(sinks.sum()), ratio=times(ratio), reading=reading)
    return Reveal(_about(ratio, 1.0, "larger", "smaller"), (said,))


def of_massive(trace: Trace) -> Reveal:
    """Which token holds the largest activation of the residual stream."""
    if not trace.massive:
        return Reveal("other", (Message.of("course.massive.none"),))
    layer, token, channel, value = max(trace.massive, key=lambda found: abs(found[3]))
    truth = "first" if token == 0 else "last" if token == trace.n_tokens - 1 else "other"
    median = float(trace.layers["median_abs"][layer])
    said = Message.of("course.massive.said", layer=layer, token=token, text=trace.tokens[token], channel=channel,
                      value=round(value, 1), ratio=round(abs(value) / median) if median else 0)  # fmt: skip
    on_first = sum(found[1] == 0 for found in trace.massive)
    return Reveal(truth, (said, Message.of("course.massive.count", first=on_first, n=len(trace.massive))))


def of_break(intact: Outcome, removed: Outcome) -> Reveal:
    """How much the loss moves when every layer loses the first key."""
    change = removed.loss - intact.loss
    truth = "barely" if abs(change) < BARELY else "some" if change < A_LOT else "lot"
    said = Message.of("course.break.said", before=round(float(np.exp(intact.loss)), 2),
                      after=round(float(np.exp(removed.loss)), 2), change=round(change, 2))  # fmt: skip
    return Reveal(truth, (said,))


def of_streaming(ppl: Mapping[str, float]) -> Reveal:
    """A window that evicted the first tokens against the same window keeping them (dense for scale)."""
    ratio = ppl["window"] / ppl["sinks"]
    truth = "explodes" if ratio >= EXPLODES else "little" if ratio >= 1.1 else "same"
    said = Message.of("course.streaming.said", dense=round(ppl["dense"], 1), window=round(ppl["window"], 1),
                      sinks=round(ppl["sinks"], 1), ratio=times(ratio))  # fmt: skip
    return Reveal(truth, (said,))


def of_kinds(trace: Trace) -> Reveal:
    """Sink heads against diagonal heads, counted."""
    kinds = trace.heads["kind"]
    sinks, diagonals = int((kinds == Kind.SINK).sum()), int((kinds == Kind.DIAGONAL).sum())
    truth = _about(sinks, diagonals, "sink", "diagonal")
    return Reveal(truth, (Message.of("course.kinds.said", sinks=sinks, diagonals=diagonals, heads=kinds.size),))


def of_cost(result: Mapping[str, object]) -> Reveal:
    """Which pattern's norm grows more slowly with T on aligned embeddings (the paper's setting)."""
    sink, diagonal = (result["slopes"][f"aligned/{pattern}"] for pattern in ("sink", "diagonal"))
    truth = "same" if sink is None or diagonal is None else _about(diagonal, sink, "sink", "diagonal")
    return Reveal(truth, tuple(cost.explanation(dict(result))[:2]))


def of_lab(toy_sink: Verdict) -> Reveal:
    """Whether the lab's softmax runs grew a sink where some queries had nothing to do."""
    truth = "yes" if toy_sink.status in ("reproduces", "partly") else "no"
    return Reveal(truth, tuple(m for m in (toy_sink.measured, toy_sink.evidence) if m is not None))


def of_claims(verdicts: Sequence[Verdict]) -> Reveal:
    """How many of the papers' claims reproduce here."""
    counts = {status: sum(v.status == status for v in verdicts) for status in STATUSES}
    share = counts["reproduces"] / len(verdicts)
    truth = "most" if share > 2 / 3 else "half" if share >= 1 / 3 else "few"
    return Reveal(truth, (Message.of("claims.summary", total=len(verdicts), **counts),))
