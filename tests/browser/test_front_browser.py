"""The front of the house, as a newcomer meets it: where to type and where to start on the first screen, a visitor
served before the server's own warm start, a model that cannot load, and icons that need no emoji font."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.helpers import (
    LOAD,
    ROOT,
    free_port,
    nav_entry,
    open_one_head,
    wait_for_analysis,
    wait_healthy,
)

FIRST_MAP_SECONDS = 15  # a visitor's own head map while the warm start runs (issue 50's budget on two cores)
WARM_LOADED = "The warm start loaded the model"
WARM_DONE = "The warm start finished"


def inside_viewport(page: Page, locator: object) -> bool:
    box = locator.bounding_box()
    size = page.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= size["height"] and box["x"] >= 0


def test_a_newcomer_at_1280_by_720_sees_where_to_type_and_where_to_start(page: Page, app_url: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(app_url)
    wait_for_analysis(page)
    box = page.get_by_test_id("stSidebar").get_by_label("Text")
    sentence = page.get_by_text(re.compile(r"^Type or paste a text in the box"))
    course = page.get_by_role("link", name=re.compile(r"^New here\? The course"))
    for shown in (box, sentence, course):
        expect(shown).to_be_visible()
        assert inside_viewport(page, shown)  # no scrolling
    course.click()
    expect(page.get_by_role("heading", name="Attention sinks, step by step")).to_be_visible(timeout=LOAD)


def test_the_navigation_is_numbered_once_grouped_and_drawn_with_material_icons(page: Page, app_url: str) -> None:
    page.goto(app_url)
    nav = page.get_by_test_id("stTopNav")
    expect(nav).to_be_visible(timeout=LOAD)
    lessons = []
    for number in range(1, 7):
        entry = nav_entry(page, "Why do sinks exist?", f"{number}. ")
        expect(entry).to_have_count(1)
        lessons.append(entry.inner_text())
        page.keyboard.press("Escape")
    assert len(set(lessons)) == 6
    expect(nav_entry(page, "Reference", "Claims scoreboard")).to_have_count(1)
    expect(page.get_by_test_id("stTopNavDropdownLink").filter(has_text="Metric definitions")).to_have_count(1)
    page.keyboard.press("Escape")
    expect(
        page.get_by_test_id("stSidebar").get_by_role("link", name=re.compile("definitions|every number"))
    ).to_have_count(0)
    icons = page.get_by_test_id("stTopNav").get_by_test_id("stIconMaterial")
    assert icons.count() >= 2  # Streamlit's own icon font: drawn without an emoji font
    emoji = re.compile("[\U0001f300-\U0001faff\u2600-\u27bf]")
    assert not emoji.search(nav.inner_text())


def test_a_hub_model_that_cannot_load_shows_its_error_first_and_no_stale_maps(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/?example=french")
    wait_for_analysis(page)
    page.get_by_test_id("stSidebar").get_by_label("Model").click()
    page.get_by_role("option", name=re.compile("^Other")).click()
    field = page.get_by_test_id("stSidebar").get_by_label("Hub id or directory")
    field.fill("someone/not-on-this-machine")
    field.press("Enter")
    error = page.get_by_test_id("stMain").get_by_test_id("stAlertContentError")
    expect(error).to_contain_text("someone/not-on-this-machine could not be loaded", timeout=LOAD)
    expect(error).to_contain_text("hf download")
    assert inside_viewport(page, error)
    expect(page.get_by_text("of heads")).to_have_count(0)
    expect(page.locator(".stPlotlyChart")).to_have_count(0)
    expect(page.get_by_test_id("stSidebar").get_by_label("Text")).to_have_value(re.compile("^Le gardien du phare"))


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A server of its own, started for this test, so its warm start is still running: (its URL, its log)."""
    port, log = free_port(), tmp_path / "streamlit.log"
    command = [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.port", str(port)]
    with log.open("w") as out:
        process = subprocess.Popen(command + ["--server.address", "127.0.0.1"], cwd=ROOT, stdout=out,
                                   stderr=subprocess.STDOUT, env=os.environ.copy())  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, process)
            yield url, log
        finally:
            process.terminate()
            process.wait(timeout=20)


def test_a_visitor_who_comes_during_the_warm_start_gets_their_map_before_it_ends(
    page: Page, fresh_server: tuple[str, Path]
) -> None:
    url, log = fresh_server
    deadline = time.monotonic() + LOAD / 1000
    while WARM_LOADED not in log.read_text(encoding="utf-8") and time.monotonic() < deadline:
        time.sleep(0.2)  # the model is loaded: the warm start's runs have begun
    text = "A visitor's own sentence, typed while the server warms up its examples for the class."
    asked = time.monotonic()
    page.goto(f"{url}/?text={quote(text)}")
    wait_for_analysis(page)
    seconds = time.monotonic() - asked
    assert WARM_DONE not in log.read_text(encoding="utf-8")  # served first: the warm start is still running
    assert seconds < FIRST_MAP_SECONDS, f"the visitor's map took {seconds:.1f} s"


def slide_to(page: Page, name: str, value: str) -> None:
    """Move the first slider called ``name`` down to ``value`` by keyboard, as a visitor would, and wait for the page
    to have run with it (a key pressed while the page reruns is lost: press again)."""
    slider = page.get_by_role("slider", name=name).first
    expect(slider).to_be_visible(timeout=LOAD)
    for _ in range(6):
        if slider.get_attribute("aria-valuetext") == value:
            break
        slider.focus()
        page.keyboard.press("ArrowLeft")
        expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning", timeout=LOAD)
    expect(slider).to_have_attribute("aria-valuetext", value)


def runs_logged(log: Path, what: str) -> int:
    """How many times the server has run ``what`` (its log names every job it runs)."""
    return log.read_text(encoding="utf-8").count(f"Ran {what} on ")


def test_two_visitors_asking_together_for_the_same_long_job_cost_one_run(
    browser: Browser, app_url: str, app_log: Path
) -> None:
    """Two visitors ask for the KV lab's eviction of the same text at the same size at once: one run, both served."""
    visitors = [browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in range(2)]
    try:
        pages = [visitor.new_page() for visitor in visitors]
        for page in pages:
            page.goto(f"{app_url}/kv?example=english")
            slide_to(page, "tokens of text", "128")
            slide_to(page, "cache size (tokens)", "16")
        before = runs_logged(app_log, "kv_evict")
        for page in pages:
            page.get_by_role("button", name="Run the four policies").click()
        for page in pages:
            expect(page.get_by_text("With a cache of 16 tokens").first).to_be_visible(timeout=LOAD)
        assert runs_logged(app_log, "kv_evict") - before == 1
    finally:
        for visitor in visitors:
            visitor.close()


def test_the_text_lit_by_a_query_is_picked_by_keyboard_and_stays_readable_at_500_tokens(
    page: Page, app_url: str
) -> None:
    english = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))[0]["text"]
    open_one_head(page, f"{app_url}/?example=english")
    token = page.locator(".ss-lit [data-query='5']")
    expect(token).to_be_visible(timeout=LOAD)
    token.focus()
    page.keyboard.press("Enter")
    expect(page.locator(".ss-lit .ss-query")).to_have_attribute("data-query", "5", timeout=LOAD)
    expect(page.get_by_text(re.compile(r"^The first token, .* takes .* of this query's attention"))).to_be_visible()
    long_text = " ".join([english] * 9)  # about 500 tokens
    open_one_head(page, f"{app_url}/?text={quote(long_text)}")
    lit = page.locator(".ss-lit")
    counted = page.get_by_test_id("stSidebar").get_by_text(re.compile(r"^\d+ tokens · limit")).inner_text()
    assert int(counted.split()[0]) >= 450
    expect(lit.locator("[data-query]")).to_have_count(int(counted.split()[0]), timeout=LOAD)  # every token
    size = lit.evaluate("box => [parseFloat(getComputedStyle(box).fontSize), box.scrollHeight > box.clientHeight]")
    assert size[0] >= 14 and size[1]  # text-sized letters, the rest scrolled to, not shrunk
