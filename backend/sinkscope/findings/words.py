"""What a word in a sentence means, in numbers: each threshold named once, for the course, the pages and the
scoreboard alike (docs/metrics.md, "Words and their thresholds").

A sentence that says "most", "rises a lot" or "reads nothing" asks one of these functions; none compares a
number with a literal of its own.
"""

from __future__ import annotations

from sinkscope.core import names

SINK_HEAD = names.KIND_THRESHOLD  # a "sink head": its largest score is the first token's weight, at least 0.5
SINK_RATE_EPS = names.DEFAULT_EPS  # "the sink rate" (Gu et al.): the share of heads over 0.3, never "sink heads"
MOST = 1 / 2  # "most": more than half
FEW = 1 / 3  # "few": under a third; between FEW and MOST (both included) is "about half"
SAME_RATIO = 1.25  # two numbers within 25% of each other are "about the same"
BARELY, A_LOT = 0.1, 1.0  # nats of loss per token: under BARELY it barely moves, over A_LOT it rises a lot
LITTLE_WORSE = 1.1  # a perplexity ratio of at least 1.1 is "a little worse"
EXPLODES = 2.0  # a perplexity at least twice the other "explodes"
NEEDS_CONTEXT = 0.01  # a head "needs the whole context" when its sinks + window alone raise perplexity by over 1%
READS = 0.5  # a sink head "reads its sink" when over half its output (value_sink) comes from the first token
READS_NOTHING = 0.1  # ... and "reads almost nothing" from it when under a tenth does
FLAT_SLOPE = 0.1  # a norm whose log-log slope against T is under 0.1 in size "stays about flat" ...
FLAT_RANGE = 2.0  # ... if its largest value is also at most twice its smallest; a wider range with no trend "varies"
RETRIEVES = 0.5  # a cache "retrieves the pass key" when the model gives the right answer a probability over one half
SPLIT_HOLDS = 1.0  # the QK split's linear prediction of a margin "holds" when within 1 logit of the real run's
HUGE = 100.0  # an activation is "huge" when it is at least 100 times its layer's median |h|


def share_word(part: int, whole: int) -> str:
    """The share of ``whole`` that ``part`` is, in words: "most" (over half), "half" (a third to a half), "few"."""
    share = part / whole if whole else 0.0
    return "most" if share > MOST else "half" if share >= FEW else "few"


def loss_word(change: float) -> str:
    """How a change of loss (nats per token) reads: "barely", "some" (a little) or "lot"."""
    return "barely" if abs(change) < BARELY else "some" if change < A_LOT else "lot"


def perplexity_word(ratio: float) -> str:
    """How one perplexity against another reads: "same", "little" (a little worse) or "explodes"."""
    return "explodes" if ratio >= EXPLODES else "little" if ratio >= LITTLE_WORSE else "same"


def compare(a: float, b: float, larger: str, smaller: str) -> str:
    """``larger`` when a is clearly above b, ``smaller`` when clearly below, else "same"."""
    if a > SAME_RATIO * b:
        return larger
    return smaller if b > SAME_RATIO * a else "same"


def growth_word(slope: float, smallest: float, largest: float) -> str:
    """How a norm that follows T with this log-log slope, between ``smallest`` and ``largest``, reads: "flat",
    "varies" (no trend, yet a wide range), "grows" or "falls"."""
    if abs(slope) < FLAT_SLOPE:
        return "flat" if largest <= FLAT_RANGE * smallest else "varies"
    return "grows" if slope > 0 else "falls"
