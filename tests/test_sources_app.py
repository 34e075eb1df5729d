"""Every figure, table or verdict not computed on the visitor's text says what it is computed on, in a line beside
it; "on this model and text" stands only over what is. Each page is walked as a visitor opens it."""

from __future__ import annotations

import json

import pytest
from sinkscope.core.i18n import Message
from sinkscope.experiments import stream_plan
from sinkscope.findings import sources
from streamlit.testing.v1 import AppTest

from tests.helpers import ROOT, opened, revealed
from views.routes import kv_page, streaming_page
from views.widgets import lab_training

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them

COST_DIM = json.loads((ROOT / "assets" / "cost.json").read_text(encoding="utf-8"))["dim"]
BACKCOPY_RUNS = len(list((lab_training.RUNS / "backcopy").glob("*.json")))
OFF_TEXT = {  # each page as it opens, and what its figures that do not read the visitor's text are computed on
    "kv": [sources.builtin(kv_page.EVICT_TOKENS[1]), sources.builtin(kv_page.EVICT_TOKENS[-1])],  # eviction, heads
    "streaming": [sources.builtin(streaming_page.DEFAULT_TOKENS)],
    "diagonals": [sources.synthetic(COST_DIM)],
    "softmax": [sources.typed_scores()],
    "lab": [sources.toy_block(), sources.lab_runs(BACKCOPY_RUNS)],
    "census": [sources.corpus()],
}
STEPS_OFF_TEXT = {
    "streaming": sources.builtin(stream_plan.CHECK.tokens),  # the check the course and the scoreboard share
    "cost": sources.synthetic(COST_DIM),
    "lab": sources.lab_runs(BACKCOPY_RUNS),
}


def lines(at: AppTest) -> list[str]:
    return [caption.value for caption in at.caption if caption.value.startswith(":material/dataset:")]


def said(message: Message) -> str:
    return ":material/dataset: " + message.text("en")


@pytest.mark.parametrize("page", list(OFF_TEXT))
def test_every_figure_not_on_the_visitors_text_names_what_it_is_computed_on(page: str) -> None:
    at = opened(page, "en", "english")
    assert sorted(lines(at)) == sorted(said(message) for message in OFF_TEXT[page])


@pytest.mark.parametrize("page", ["explorer", "reads-nothing", "massive", "origins"])
def test_a_page_computed_on_the_visitors_text_claims_no_other_source(page: str) -> None:
    assert lines(opened(page, "en", "english")) == []


@pytest.mark.parametrize("step", list(STEPS_OFF_TEXT))
def test_a_course_step_not_on_the_learners_text_says_so_and_never_this_model_and_text(step: str) -> None:
    at = revealed(step, "en", "english")
    assert lines(at) == [said(STEPS_OFF_TEXT[step])]
    assert not any("On this model and text" in box.value for box in at.info)


def test_a_step_on_the_learners_text_says_so() -> None:
    at = revealed("map", "en", "english")
    verdict = [box.value for box in (*at.info, *at.success)]
    assert lines(at) == [] and verdict
    assert all("What was measured" not in text for text in verdict)
