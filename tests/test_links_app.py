"""Links and the text box say what they dropped (issue 38, item 4): every link value that is ignored, cut or
repeated is named once, a hostile value stays one short line, a text longer than the box is refused with the
limit named (pasted or linked), and a model the server lacks is named. In-process (AppTest), bundled model."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sinkscope.core.bundled import BundledModel
from sinkscope.course import STEPS
from sinkscope.experiments import stream_plan
from streamlit.testing.v1 import AppTest

from tests.helpers import ROOT, TIMEOUT, go_to
from views.state import cache, session

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them

HOSTED_BOX = 200 * 1024  # characters: the hosted default upload limit, which the box shares


@pytest.fixture
def hosted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., AppTest]]:
    """An app on a hosted server, opened on a link's parameters (the server's shared state rebuilt)."""
    monkeypatch.setenv("SINKSCOPE_HOSTED", "1")
    cache.shared.clear()

    def opened(page: str = "", **params: str | list[str]) -> AppTest:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
        at.query_params.update(params)
        (go_to(at, page) if page else at).run()
        assert not at.exception, at.exception
        return at

    yield opened
    cache.shared.clear()


def notices(at: AppTest) -> list[str]:
    return [w.value for w in at.warning]


def test_a_course_link_names_answers_past_the_last_step_a_repeated_step_and_a_bad_present(
    hosted: Callable[..., AppTest],
) -> None:
    answers = ".".join([STEPS[0].choices[0]] + [""] * (len(STEPS) - 1) + ["eleventh", "twelfth"])
    at = hosted("course", lang="en", example="english", step=["2", "5"], answers=answers, present="<script>")
    said = " ".join(notices(at))
    assert "step=2" in said and "answers=eleventh" in said and "answers=twelfth" in said
    assert r"present=\<script\>" in said  # escaped: markdown shows the characters, never a tag
    assert at.session_state["course_step"] == 4 and at.session_state["course_answers"][0] == STEPS[0].choices[0]
    assert at.session_state["present"] is False


def test_a_hostile_value_is_cut_to_one_short_line_and_many_values_are_counted(hosted: Callable[..., AppTest]) -> None:
    at = hosted("course", lang="en", example="english", answers="x" * 10_000)
    (said,) = [n for n in notices(at) if "answers=" in n]
    assert len(said) < 200 and "answers=xxx" in said and "…" in said
    many = {"head": [str(-n) for n in range(1, 10)]}  # nine values of one key: eight repeats and a bad last
    said = " ".join(notices(hosted(**many)))
    assert said.count("head=") == 6 and "and 3 others" in said


def test_a_linked_text_longer_than_the_box_opens_the_example_and_says_why(hosted: Callable[..., AppTest]) -> None:
    at = hosted(text="a" * (HOSTED_BOX + 1))
    assert f"This link's text has {HOSTED_BOX + 1:,} characters, more than the {HOSTED_BOX:,}" in " ".join(notices(at))
    assert at.sidebar.text_area(key="text").value == session.EXAMPLES["english"]["text"]


def test_a_pasted_text_longer_than_the_box_is_refused_whole_and_the_text_before_kept(
    hosted: Callable[..., AppTest],
) -> None:
    at = hosted()
    before = at.sidebar.text_area(key="text").value
    at.sidebar.text_area(key="text").set_value("b" * (HOSTED_BOX + 5)).run()
    assert not at.exception, at.exception
    (error,) = [e.value for e in at.sidebar.error]
    assert error.startswith(f"That text has {HOSTED_BOX + 5:,} characters, more than the {HOSTED_BOX:,}")
    assert at.sidebar.text_area(key="text").value == before  # nothing the user had is lost
    at.sidebar.text_area(key="text").set_value("A short text of one's own.").run()
    assert not at.sidebar.error  # the refusal is said once, not after the next good edit


def test_a_bundled_model_the_server_lacks_is_named(
    hosted: Callable[..., AppTest], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(BundledModel, "installed", lambda model: model.key != "gemma3-270m")
    at = hosted(model="gemma3-270m")
    assert any(n.startswith("This link asks for Gemma-3-270M") for n in notices(at))
    assert at.sidebar.selectbox(key="model_choice").value == "smollm2-135m"


def test_the_course_opens_the_streaming_page_on_the_check_its_step_ran(hosted: Callable[..., AppTest]) -> None:
    """Issue 51, item 6: step 7 said "3 times" at 512 tokens and its link opened /streaming at 256 (2.2x)."""
    at = hosted("streaming", **stream_plan.link_values())
    assert [s.value for s in at.slider][:2] == [stream_plan.CHECK.tokens, stream_plan.CHECK.window]
    assert at.select_slider[0].value == stream_plan.CHECK.sinks
    assert at.multiselect[0].value == list(stream_plan.CHECK.methods) and not at.warning
    odd = hosted("streaming", tokens="100", methods="dense,nope")
    assert odd.slider[0].value == 256 and "tokens=100" in odd.warning[0].value and "nope" in odd.warning[0].value
