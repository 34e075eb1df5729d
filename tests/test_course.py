"""The course: links that carry its progress, and reveals that follow the numbers (hand-built inputs, no model)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import LANGUAGES, Message, Text, catalogue
from sinkscope.course import STEPS, answers_param, parse_answers, reveals, step_index
from sinkscope.experiments import claims, interventions, stream_plan
from sinkscope.experiments.claims import CLAIMS, Verdict
from sinkscope.experiments.interventions import Outcome
from sinkscope.experiments.kv_quant import ClaimRuns
from sinkscope.experiments.streaming import method_cache
from sinkscope.findings import words
from sinkscope.plot import fig_stream_check


def trace(kinds: list[str], sink: list[float], value_ratio: float = 0.2, massive_token: int = 0) -> Trace:
    """One layer of len(kinds) heads over three tokens, with the given kinds and sink scores."""
    n = len(kinds)
    heads = {"sink": np.array([sink]), "value_norm_ratio": np.full((1, n), value_ratio),
             "value_sink": np.array([[0.9] + [0.1] * (n - 1)]), "learned_sink": np.zeros((1, n)),
             "kind": np.array([kinds], dtype=object)}  # fmt: skip
    layers = {"median_abs": np.array([0.5, 2.0]), "top1": np.array([1.0, 900.0])}
    massive = ((1, massive_token, 7, 900.0),)
    return Trace("m", (5, 6, 7), ("The", " cat", "."), heads, layers, massive, np.zeros((2, 3, 4)),
                 np.zeros((1, n, 3)), np.zeros((1, 3)))  # fmt: skip


def outcome(loss: float) -> Outcome:
    return Outcome(np.full(2, loss), (), {}, np.zeros(2), np.zeros(2))


def test_a_link_carries_the_step_and_the_answers_and_names_what_it_cannot_use() -> None:
    answers = ("first", None, "smaller") + (None,) * (len(STEPS) - 3)
    assert answers_param(answers) == "first..smaller"
    assert parse_answers("first..smaller") == (answers, [])
    parsed, unknown = parse_answers("first.maybe..first")  # "maybe" is no choice of step 2, "first" is of step 4
    assert parsed[:4] == ("first", None, None, "first") and unknown == ["maybe"]
    past_the_last = ".".join([""] * len(STEPS) + ["first", "", "x"])  # a part after the last is named, not dropped
    assert parse_answers(past_the_last) == ((None,) * len(STEPS), ["first", "x"])
    last = str(len(STEPS))
    assert [step_index(v) for v in ("1", last, "0", last + "1", "two", None)] == [
        0,
        len(STEPS) - 1,
        None,
        None,
        None,
        None,
    ]


def test_every_step_has_its_question_title_and_choices_in_every_language() -> None:
    for lang in LANGUAGES:
        texts = catalogue(lang)
        for step in STEPS:
            assert [key for key in step.keys() if not texts.get(key)] == [], lang


def test_the_map_names_the_commonest_kind_of_head_and_counts_them() -> None:
    sinky = reveals.of_map(trace(["sink", "sink", "sink", "diagonal"], [0.9, 0.8, 0.7, 0.0]))
    assert sinky.truth == "first"
    said = dict(sinky.said[0].params)
    assert (said["token"], said["sink"], said["diagonal"], said["heads"]) == ("The", 75.0, 25.0, 4)
    assert reveals.of_map(trace(["mixed", "mixed", "diagonal"], [0.1, 0.2, 0.0])).truth == "spread"


def test_the_budget_names_the_strongest_sink_head_and_says_rows_sum_to_one() -> None:
    found = reveals.of_budget(trace(["sink", "sink"], [0.6, 0.95]))
    assert found.truth == "one"
    assert dict(found.said[1].params) == {"layer": 0, "head": 1, "weight": 95.0, "token": "The"}


def test_the_value_answer_follows_the_ratio() -> None:
    assert reveals.of_reads(trace(["sink", "mixed"], [0.9, 0.1], value_ratio=0.2)).truth == "smaller"
    assert reveals.of_reads(trace(["sink", "mixed"], [0.9, 0.1], value_ratio=3.0)).truth == "larger"
    assert reveals.of_reads(trace(["sink", "mixed"], [0.9, 0.1], value_ratio=1.1)).truth == "same"
    ratio, counted = reveals.of_reads(trace(["sink", "mixed"], [0.9, 0.1], value_ratio=0.2)).said
    assert ratio.text("en").endswith("5x less (median).")
    assert counted.text("en").startswith("Every one of the 1 sink head takes more than 0.5 of its output")


def test_the_massive_answer_names_the_token_that_holds_the_largest_activation() -> None:
    assert reveals.of_massive(trace(["sink"], [0.9], massive_token=0)).truth == "first"
    last = reveals.of_massive(trace(["sink"], [0.9], massive_token=2))
    assert last.truth == "last" and dict(last.said[0].params)["ratio"] == 450  # 900 against a median of 2


@pytest.mark.parametrize(("before", "after", "truth"), [(2.0, 2.05, "barely"), (2.0, 2.5, "some"), (2.0, 4.0, "lot")])
def test_the_break_answer_follows_the_loss(before: float, after: float, truth: str) -> None:
    found = reveals.of_break(outcome(before), outcome(after))
    assert found.truth == truth and dict(found.said[0].params)["change"] == round(after - before, 2)


def test_streaming_explodes_only_when_evicting_the_sinks_doubles_perplexity() -> None:
    assert reveals.of_streaming({"dense": 17.5, "window": 64.4, "sinks": 21.6}).truth == "explodes"
    assert reveals.of_streaming({"dense": 17.5, "window": 25.0, "sinks": 21.6}).truth == "little"
    assert reveals.of_streaming({"dense": 17.5, "window": 21.7, "sinks": 21.6}).truth == "same"


@pytest.mark.parametrize(
    ("bare", "kept", "truth", "back"),
    [(4.0, 2.5, "most", 75), (4.0, 3.5, "some", 25), (4.0, 4.2, "none", -10), (1.9, 1.9, "none", 0),
     (4.0, 1.5, "most", 125)],
)  # fmt: skip
def test_the_kv_answer_is_the_share_of_the_quantized_loss_the_sinks_win_back(
    bare: float, kept: float, truth: str, back: int
) -> None:
    """Issue 51, item 7: "83% of the loss comes back" was a share of perplexity under a figure that plots the loss
    in nats (75% there); the share is taken on the loss, the number the scoreboard's verdict reads too."""
    intact = Outcome(np.full(3, 2.0), (), {}, np.zeros(2), np.zeros(2))
    shown = reveals.of_kv(intact, np.full(3, bare), np.full(3, kept), 2)
    assert shown.truth == truth  # (4 - 2.5) / (4 - 2) = 0.75 nats: most (on perplexity it was 0.90); no worse: none
    assert dict(shown.said[0].params)["back"] == back
    assert (shown.said[0].key == "course.kv.said_over") == (back > 100)  # "and more", never "125% comes back"
    runs = ClaimRuns(np.full(3, 2.0), np.full(3, bare), np.full(3, kept), 3, 1)
    rescued = claims.from_kv(runs).status == "reproduces"
    assert rescued == (truth == "most" and bare >= 2.0 + np.log(1.1))  # the scoreboard: it hurts, and most comes back


def test_sinks_against_diagonals_is_counted() -> None:
    assert reveals.of_kinds(trace(["sink", "sink", "diagonal"], [0.9, 0.9, 0.0])).truth == "sink"
    assert reveals.of_kinds(trace(["sink", "diagonal", "diagonal"], [0.9, 0.0, 0.0])).truth == "diagonal"
    assert reveals.of_kinds(trace(["sink", "diagonal"], [0.9, 0.0])).truth == "same"


def test_the_scoreboard_answer_counts_reproducing_claims() -> None:
    said = Message.of("claims.yours.rate", rate=1.0, n=3, eps=0.3)
    verdicts = [Verdict(str(i), status, said) for i, status in enumerate(["reproduces"] * 9 + ["partly"] * 5)]
    found = reveals.of_claims(verdicts)
    assert found.truth == "most"  # T2: 9 of 14 is more than half, and "most" means more than half
    assert found.said[0].text("en").startswith("**Of 14 claims: 9 reproduce here, 5 partly, 0 differ")
    assert found.said[1].text("pt") == "9 de 14 se reproduzem: 64%, mais da metade."
    partly = [Verdict("p", "partly", said)] * 10
    assert reveals.of_claims(verdicts[:7] + partly[:7]).truth == "half"  # exactly half is not most
    assert reveals.of_claims(verdicts[:4] + partly).truth == "few"
    one = reveals.of_claims(verdicts[:1] + partly[:1]).said[0]
    assert "1 reproduces here" in one.text("en") and "1 se reproduz aqui" in one.text("pt")  # CLDR plurals


def test_the_streaming_step_states_the_cache_the_check_holds() -> None:
    """T1: the question, the sentence and the figure name the sizes the check runs with; the window alone holds
    the whole cache (sinks + window), as on the streaming page, not the 60 typed into the catalogue before."""
    sizes = stream_plan.check_values()
    setup = stream_plan.CHECK
    assert sum(method_cache("mask-window", setup.sinks, setup.window, setup.tokens)) == sizes["cache"]
    assert method_cache("mask-sinks", setup.sinks, setup.window, setup.tokens) == (sizes["sinks"], sizes["window"])
    step = next(step for step in STEPS if step.id == "streaming")
    for lang in LANGUAGES:
        question = Text(lang)(step.key("question"), **reveals.question_values(step))
        said = reveals.of_streaming({"dense": 17.5, "window": 64.4, "sinks": 21.6}).said[0].text(lang)
        bars = fig_stream_check({"dense": 17.5, "window": 64.4, "sinks": 21.6}, sizes, "mask", lang).data[0].y
        for text in (question, said, " ".join(bars)):
            assert str(sizes["cache"]) in text and str(sizes["sinks"]) in text, (lang, text)
        assert str(sizes["window"]) in question and str(sizes["window"]) in said


def test_the_streaming_figure_draws_every_number_the_sentence_cites_on_a_linear_axis_from_zero() -> None:
    """T12: on a log axis starting near 20, 21.6 looked 15x smaller than 64.4 (3x); dense was not drawn."""
    fig = fig_stream_check({"dense": 17.5, "window": 64.4, "sinks": 21.6}, stream_plan.check_values(), "mask")
    assert list(fig.data[0].x) == [17.5, 64.4, 21.6]
    assert fig.layout.xaxis.type in (None, "linear") and fig.layout.xaxis.range[0] == 0


def test_the_claims_question_counts_the_claims_the_scoreboard_checks() -> None:
    step = next(step for step in STEPS if step.id == "claims")
    assert f" {len(CLAIMS)} " in Text("en")(step.key("question"), **reveals.question_values(step))


def cost_result(aligned: tuple[float, float], random: tuple[float, float]) -> dict[str, object]:
    """A cost sweep with the given (sink, diagonal) slopes and a norm at T = 8, 32 and 1024 for each pattern."""
    slopes = {f"{g}/{p}": v for g, pair in (("aligned", aligned), ("random", random))
              for p, v in zip(("sink", "diagonal"), pair, strict=True)}  # fmt: skip
    points = [{"geometry": g, "pattern": p, "n_tokens": n, "norm": norm, "worst": 0.9}
              for g in ("aligned", "random") for p in ("sink", "diagonal")
              for n, norm in ((8, 3.1), (32, 12.8), (1024, 6.8))]  # fmt: skip
    return {"slopes": slopes, "points": points, "dim": 32}


@pytest.mark.parametrize(
    ("aligned", "random", "truth", "status"),
    [((0.03, 0.49), (0.9, 0.13), "depends", "partly"), ((0.03, 0.49), (0.1, 0.5), "sink", "reproduces"),
     ((0.9, 0.1), (0.8, 0.2), "diagonal", "differs")],
)  # fmt: skip
def test_the_cost_step_and_the_scoreboard_read_one_comparison(aligned, random, truth: str, status: str) -> None:
    """T11: step 8 marked "the sink" right while the scoreboard rated the same claim "partly" (random embeddings
    make the diagonal cheaper); both now read ``cost.cheaper``, and step 8 answers "it depends"."""
    result = cost_result(aligned, random)
    assert reveals.of_cost(result).truth == truth
    assert claims.from_cost(result).status == status


def test_a_norm_that_rises_fourfold_and_falls_back_is_not_called_flat() -> None:
    """Issue 51, item 8: a slope of 0.03 over a norm that goes 3.1 -> 12.8 -> 6.8 was said to "stay about flat";
    "flat" also needs the largest norm within words.FLAT_RANGE of the smallest."""
    said = reveals.of_cost(cost_result((0.03, 0.49), (0.9, 0.13))).said[0].text("en")
    assert "the sink's norm has no clear trend but does not stay flat (log-log slope 0.03: 3.1 at T = 8, 12.8" in said
    assert "6.8 at T = 1,024" in said and "stays about flat" not in said and "sink's norm grows" not in said
    assert words.growth_word(0.03, 3.1, 5.0) == "flat" and words.growth_word(0.03, 3.1, 12.8) == "varies"


SOFTMAX_UNIT = ("course.budget.learned", "course.budget.rows_one")  # "a row sums to 1": the definition, not a measure


@pytest.mark.parametrize("lang", LANGUAGES)
def test_no_measured_number_is_typed_into_the_course(lang: str) -> None:
    """Item 2 for the course: every number a step says comes through a placeholder, filled from a finding or a
    declared setting (the cache, the thresholds, the number of claims); T1's "60" was typed in."""
    typed = {
        key: text
        for key, text in catalogue(lang).items()
        if key.startswith("course.")
        and key not in SOFTMAX_UNIT
        and re.search(r"\d", re.sub(r"\{[^}]*\}|\(\d{4}\)|float32", "", text))  # a year, a dtype: no measurement
    }
    assert typed == {}
    for step in STEPS:  # and every placeholder a question or a choice has is filled
        values = reveals.question_values(step) | reveals.choice_values(step)
        for key in step.keys()[1:]:
            assert "{" not in Text(lang)(key, **values), key


def test_step_five_runs_the_break_pages_default_removal() -> None:
    """T5: step 5 removed the first key in layers 0-29 (+0.18 nats, "a little") while the break page's default,
    layers 2-29, cost +1.04 nats ("a lot"); one declared default now serves both, and the question states it."""
    change = interventions.default_drop(30)
    assert change.layers == tuple(range(interventions.DROP_FROM, 30)) and change.k == 1
    assert interventions.default_drop(2).layers == (1,)  # a two-layer model still loses the first key somewhere
    step = next(step for step in STEPS if step.id == "break")
    question = Text("en")(step.key("question"), **reveals.question_values(step))
    assert f"from layer {interventions.DROP_FROM} on (the default of the page “Break the sink”)" in question


def test_step_three_does_not_title_a_claim_its_numbers_deny() -> None:
    """T4: titled "The sink reads nothing" beside 106 of 189 sink heads taking more than half their output from
    the first token; the title now asks what a sink head reads, and the reveal counts the heads that read it."""
    step = next(step for step in STEPS if step.id == "reads")
    for lang in LANGUAGES:
        assert Text(lang)(step.key("title")) != catalogue(lang)["reads.title"]  # the lesson's story, not a finding
    found = reveals.of_reads(trace(["sink", "sink", "mixed"], [0.9, 0.8, 0.1]))
    assert found.said[1].key == "reads.counted" and dict(found.said[1].params)["reading"] == 1
