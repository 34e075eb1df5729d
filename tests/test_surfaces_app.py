"""One number, everywhere (issue 36, item 4): a finding that several surfaces state (a course step, its page, the
scoreboard, the handout) is rendered on each of them for two texts in two languages, and the numbers are equal.

Each surface is opened in-process (AppTest) on the bundled model; the numbers are computed here from the trace,
independently of the findings functions the pages call.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from sinkscope.core.capture import analyze
from sinkscope.core.i18n import Text
from sinkscope.experiments.claims import CLAIMS

from tests.helpers import ROOT, course_step, opened

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them

EXAMPLES = {e["id"]: e["text"] for e in json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))}
CASES = [("portuguese", "pt"), ("french", "fr")]  # two texts, two languages


def handout(lang: str, example: str) -> str:
    """The handout's text (what its download holds, previewed in the page's frame), tags removed."""
    page = opened("handout", lang, example).get("iframe")[0].proto.srcdoc
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def numbers(text: str) -> set[str]:
    """Every whole number the text writes (not the digits of a decimal); the counts here are all under 1000."""
    return set(re.findall(r"(?<![\d,.])\d+(?!\d|[,.]\d)", text))


def sentence(text: str, *needles: str) -> str:
    """The sentence of ``text`` that holds every needle."""
    found = [s for s in re.split(r"(?<=[.!?])\s+", text) if all(needle in s for needle in needles)]
    assert found, (needles, text[:400])
    return found[0]


@pytest.mark.parametrize(("example", "lang"), CASES)
def test_the_sink_heads_that_read_their_sink_are_one_count_on_every_surface(
    smollm2: object, example: str, lang: str
) -> None:
    heads = analyze(smollm2, EXAMPLES[example]).heads
    sinks = heads["kind"] == "sink"
    reading, total = str(int((sinks & (heads["value_sink"] > 0.5)).sum())), str(int(sinks.sum()))
    tr = Text(lang)
    step = sentence(course_step("reads", lang, example), "value_sink", tr.num(0.5, "g"))
    page = sentence(" ".join(m.value for m in opened("reads-nothing", lang, example).markdown), "value_sink")
    board = opened("claims", lang, example).table[0].value
    row = board.iloc[[i for i, name in enumerate(board.index) if name == tr("claims.value_little")][0]]
    for surface in (step, page, " ".join(map(str, row.to_numpy()))):
        assert {reading, total} <= numbers(surface), surface


@pytest.mark.parametrize(("example", "lang"), CASES)
def test_the_massive_flags_are_one_count_on_the_step_the_page_and_the_scoreboard(
    smollm2: object, example: str, lang: str
) -> None:
    trace = analyze(smollm2, EXAMPLES[example])
    flags, on_first = str(len(trace.massive)), str(sum(token == 0 for _, token, _, _ in trace.massive))
    cells = str(len({(token, channel) for _, token, channel, _ in trace.massive}))
    step = course_step("massive", lang, example)
    page = " ".join(m.value for m in opened("massive", lang, example).markdown)
    board = opened("claims", lang, example).table[0].value
    row = board.iloc[[i for i, name in enumerate(board.index) if name == Text(lang)("claims.massive_first")][0]]
    counted = f"{flags} " + {"en": "flags", "fr": "signalements", "pt": "sinalizações"}[lang]  # "17 flags over ..."
    for surface in (sentence(step, counted), sentence(page, counted)):
        assert {flags, on_first} | ({cells} - {"1"}) <= numbers(surface), surface  # one activation: in words
    assert {flags, on_first} <= numbers(" ".join(map(str, row.to_numpy())))


@pytest.mark.parametrize(("example", "lang"), CASES)
def test_the_claims_that_reproduce_are_one_count_on_step_ten_the_scoreboard_and_the_handout(
    example: str, lang: str
) -> None:
    step = course_step("claims", lang, example)
    summary = " ".join(m.value for m in opened("claims", lang, example).markdown if m.value.startswith("**"))
    reproduce = re.search(r"(\d+)", summary.split(":", 1)[1])[1]  # the summary's first count: reproduces
    assert summary.strip("*") in step and summary.strip("*") in handout(lang, example)
    assert re.search(rf"\b{reproduce} \w+ {len(CLAIMS)} ", step), step  # "9 de 14 se reproduzem: 64%"
