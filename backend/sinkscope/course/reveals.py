"""What holds on the learner's model for each step of the course: the choice that is true, and why, in numbers.

Each function takes data the pages already measure (a Trace, two Outcomes, the streaming perplexities, the cost
sweep, the scoreboard's verdicts) and returns a ``Reveal``; the sentences are catalogue keys with parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sinkscope.core.capture import Trace
from sinkscope.core.i18n import Message
from sinkscope.core.loss import LEVEL, perplexity
from sinkscope.core.metrics import MASSIVE_ABS, MASSIVE_RATIO
from sinkscope.core.names import DEFAULT_EPS, KIND_THRESHOLD, Kind
from sinkscope.course.steps import Reveal, Step
from sinkscope.experiments import cost, stream_plan
from sinkscope.experiments.claims import CLAIMS, RECOVERS, STATUSES, Verdict
from sinkscope.experiments.interventions import DROP_FROM, Outcome
from sinkscope.experiments.kv_quant import CLAIM_BITS, won_back_interval
from sinkscope.experiments.writes import WriteRemoved, first_writes
from sinkscope.findings import heads as head_findings
from sinkscope.findings import residual, words
from sinkscope.findings.origins import sink_phases

KIND_CHOICE = {Kind.SINK: "first", Kind.PREVIOUS_TOKEN: "previous", Kind.DIAGONAL: "itself", Kind.MIXED: "spread"}
SHARE_SAID = {"most": "course.claims.share_most", "half": "course.claims.share_half", "few": "course.claims.share_few"}
LEARNED_MASS = 0.01  # a learned sink logit that takes more than 1% of a row on average makes rows sum below one


def choice_values(step: Step) -> dict[str, float]:
    """The thresholds a step's choices state ("under 0.1 nats"), read from ``findings.words``."""
    return {"break": {"barely": words.BARELY, "lot": words.A_LOT}, "streaming": {"explodes": words.EXPLODES},
            "kv": {"most": round(100 * RECOVERS)}}.get(step.id, {})  # fmt: skip


def question_values(step: Step) -> dict[str, object]:
    """The declared settings a step's question states (the streaming cache, the number of claims), never typed."""
    return {"streaming": stream_plan.check_values(), "claims": {"total": len(CLAIMS)}, "kv": {"bits": CLAIM_BITS},
            "break": {"first": DROP_FROM, "page": Message.of("break.title")},
            "massive": {"size": MASSIVE_ABS, "ratio": MASSIVE_RATIO}}.get(step.id, {})  # fmt: skip


def of_map(trace: Trace) -> Reveal:
    """Which key most heads look at: the most common kind of head."""
    kinds = trace.heads["kind"]
    shares = head_findings.kind_shares(kinds)
    truth = KIND_CHOICE[max(KIND_CHOICE, key=shares.get)]
    said = Message.of("course.map.said", heads=kinds.size, token=trace.tokens[0], sink=shares[Kind.SINK],
                      diagonal=shares[Kind.DIAGONAL], previous=shares[Kind.PREVIOUS_TOKEN],
                      mixed=shares[Kind.MIXED], threshold=KIND_THRESHOLD)  # fmt: skip
    rate = Message.of("course.map.rate", rate=round(trace.sink_rate(), 1), n=trace.n_tokens, eps=DEFAULT_EPS,
                      threshold=KIND_THRESHOLD)  # fmt: skip
    return Reveal(truth, (said, rate))


def of_budget(trace: Trace) -> Reveal:
    """A softmax row spends one unit; a learned sink logit (gpt-oss) keeps some of it off the real keys."""
    layer, head = head_findings.strongest(trace.heads, "sink")
    weight = round(100 * float(trace.heads["sink"][layer, head]), 1)
    names = Message.of("course.budget.said", layer=layer, head=head, weight=weight, token=trace.tokens[0])
    learned = float(np.nanmean(trace.heads["learned_sink"]))
    if trace.learned_sinks and learned > LEARNED_MASS:
        return Reveal("less", (Message.of("course.budget.learned", mass=round(100 * learned, 1)), names))
    return Reveal("one", (Message.of("course.budget.rows_one"), names))


def of_reads(trace: Trace) -> Reveal:
    """The sink heads' first value against a typical one (median ratio), and how many read it all the same."""
    found = head_findings.sink_reading(trace.heads)
    if not found.sinks:
        return Reveal("same", (Message.of("course.reads.no_sinks"),))
    said = Message.of("course.reads.said", n=found.sinks, ratio=found.ratio())
    return Reveal(words.compare(found.value_ratio, 1.0, "larger", "smaller"), (said, found.said()))


def of_massive(trace: Trace) -> Reveal:
    """Which token holds the largest activation of the residual stream, and how many activations are flagged."""
    found = residual.massive(trace.massive, trace.layers)
    if found is None:
        return Reveal("other", (Message.of("course.massive.none"),))
    layer, token, channel, value = found.largest
    truth = "first" if token == 0 else "last" if token == trace.n_tokens - 1 else "other"
    said = Message.of("course.massive.said", layer=layer, token=token, text=trace.tokens[token], channel=channel,
                      value=round(value, 1), ratio=round(found.ratio))  # fmt: skip
    return Reveal(truth, (said, residual.counted(found)))


def of_origins(trace: Trace, removed: WriteRemoved | None) -> Reveal:
    """Where the sink appears (its phases, and whether the massive activation comes first), which write builds the
    first token's largest massive activation, and what the sink does without it."""
    phases = sink_phases(trace).said()
    built = first_writes(trace) if trace.writes is not None else None
    if built is None or built.builder is None:
        return Reveal("none", (phases, built.said() if built is not None else Message.of("course.origins.no_writes")))
    if removed is None:
        return Reveal(built.builder.part, (phases, built.said()))
    without = Message.of("course.origins.said", before=round(removed.sink_after(removed.intact), 1),
                         after=round(removed.sink_after(removed.changed), 1), layer=removed.removed.block + 1,
                         eps=removed.eps, change=round(removed.loss_change, 2))  # fmt: skip
    return Reveal(built.builder.part, (phases, built.said(), without))


def of_break(intact: Outcome, removed: Outcome) -> Reveal:
    """How much the loss moves when every layer from ``DROP_FROM`` on loses the first key (the break page's default)."""
    change = removed.loss - intact.loss
    truth = words.loss_word(change)
    said = Message.of("course.break.said", before=round(intact.perplexity, 2),
                      after=round(removed.perplexity, 2), change=round(change, 2))  # fmt: skip
    return Reveal(truth, (said,))


def of_streaming(ppl: Mapping[str, float]) -> Reveal:
    """A window that evicted the first tokens against the same window keeping them (dense for scale)."""
    ratio = ppl["window"] / ppl["sinks"]
    truth = words.perplexity_word(ratio)
    said = Message.of("course.streaming.said", dense=round(ppl["dense"], 1), window_ppl=round(ppl["window"], 1),
                      sinks_ppl=round(ppl["sinks"], 1), ratio=round(ratio, 1),
                      **stream_plan.check_values())  # fmt: skip
    return Reveal(truth, (said,))


def of_kv(intact: Outcome, bare: np.ndarray, kept: np.ndarray, sinks: int) -> Reveal:
    """How much of the loss a CLAIM_BITS-bit cache adds comes back when the ``sinks`` detected sinks stay in full
    precision (``bare`` and ``kept``: per-token NLL), on the loss the figure plots, read with the scoreboard's
    RECOVERS; perplexities beside it."""
    runs = (intact.nll, bare, kept)
    loss = [round(float(np.mean(nll)), 3) for nll in runs]
    ppl = [round(perplexity(nll), 1) for nll in runs]
    back = won_back_interval(*runs)
    truth = "most" if back.value > RECOVERS else "some" if back.value > 0 else "none"
    over = back.value > 1  # the kept cache beats the float one: "125% comes back" would read as an error
    said = Message.of("course.kv.said_over" if over else "course.kv.said", bits=CLAIM_BITS, dense=ppl[0], bare=ppl[1],
                      kept=ppl[2], dense_loss=loss[0],
                      bare_loss=loss[1], kept_loss=loss[2], n=sinks, back=round(100 * back.value),
                      low=round(100 * back.low), high=round(100 * back.high), level=round(100 * LEVEL))  # fmt: skip
    return Reveal(truth, (said,))


def of_kinds(trace: Trace) -> Reveal:
    """Sink heads against diagonal heads, counted."""
    counts = head_findings.kind_counts(trace.heads["kind"])
    sinks, diagonals = counts[Kind.SINK], counts[Kind.DIAGONAL]
    truth = words.compare(sinks, diagonals, "sink", "diagonal")
    said = Message.of("course.kinds.said", sinks=sinks, diagonals=diagonals, heads=trace.heads["kind"].size)
    return Reveal(truth, (said,))


def of_cost(result: Mapping[str, object]) -> Reveal:
    """Which pattern's norm grows more slowly with T (``cost.cheaper``, as the scoreboard reads it): one answer when
    aligned and random embeddings agree, "depends" when they do not."""
    found = set(cost.cheaper(dict(result)).values())
    truth = found.pop() if len(found) == 1 else "depends"
    return Reveal(truth, tuple(cost.explanation(dict(result))))


def of_lab(toy_sink: Verdict) -> Reveal:
    """Whether the lab's softmax runs grew a sink where some queries had nothing to do."""
    truth = "yes" if toy_sink.status in ("reproduces", "partly") else "no"
    return Reveal(truth, tuple(m for m in (toy_sink.measured, toy_sink.evidence) if m is not None))


def of_claims(verdicts: Sequence[Verdict]) -> Reveal:
    """How many of the papers' claims reproduce here."""
    counts = {status: sum(v.status == status for v in verdicts) for status in STATUSES}
    truth = words.share_word(counts["reproduces"], len(verdicts))
    share = Message.of(SHARE_SAID[truth], n=counts["reproduces"], total=len(verdicts),
                       share=round(100 * counts["reproduces"] / len(verdicts)))  # fmt: skip
    return Reveal(truth, (Message.of("claims.summary", total=len(verdicts), **counts), share))
