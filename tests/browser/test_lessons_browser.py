"""The why-sinks pages in a real browser: the softmax toy and one intervention, reached as a user would."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from sinkscope.experiments.claims import CLAIMS

from tests.browser.helpers import LOAD, nav_entry, wait_for_analysis


def test_the_softmax_page_recomputes_the_bars_from_typed_scores(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/softmax")
    bars = page.locator(".stPlotlyChart").filter(has_text="softmax+1").first
    expect(bars).to_contain_text("sum 1.000", timeout=LOAD)
    box = page.get_by_label("Attention scores of one query against its keys (q·k/√d)")
    box.fill("0, 0, 9, 0")
    box.press("Enter")
    expect(bars).to_contain_text("withheld 0.000", timeout=LOAD)
    expect(page.get_by_text(re.compile(r"^Largest difference"))).to_be_visible(timeout=LOAD)
    page.get_by_text("Two matches").click()
    expect(box).to_have_value("0.0, 4.0, 0.1, 0.0, 4.0, \u22120.1", timeout=LOAD)
    box.fill("1, two")
    box.press("Enter")
    expect(page.get_by_text("Scores must be numbers")).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("Traceback")).to_have_count(0)


def test_the_chosen_text_follows_the_user_to_a_lesson_and_an_intervention_runs(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/?example=french")
    wait_for_analysis(page)
    sidebar = page.get_by_test_id("stSidebar")
    nav_entry(page, "Why do sinks exist?", "6. Break the sink").click()
    expect(page).to_have_url(re.compile(r"/break"), timeout=LOAD)
    expect(sidebar.get_by_label("Text")).to_have_value(re.compile(r"^Le gardien du phare"), timeout=LOAD)
    page.get_by_role("button", name="Drop them").click()
    cell = page.get_by_text("drop the first key in layers 2-29")  # drawn on a canvas: the cell stays hidden
    expect(cell.first).to_be_attached(timeout=LOAD)
    title = page.locator(".stPlotlyChart .gtitle").filter(has_text="Mean attention to the first")  # wrapped title
    expect(title.first).to_be_visible(timeout=LOAD)


def test_the_claims_scoreboard_and_the_lab_open_from_direct_links(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/claims?example=english")
    expect(page.get_by_text(re.compile(rf"^Of {len(CLAIMS)} claims: \d+ reproduce here"))).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("Traceback")).to_have_count(0)
    page.goto(f"{app_url}/lab")
    expect(page.get_by_text("Softmax forms a sink").first).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("share of attention").first).to_be_visible(timeout=LOAD)  # the softmax run's axis
    page.get_by_text("Induction (last query only)").click()
    expect(page.get_by_text(re.compile(r"^Varre et al\.'s induction task"))).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("Traceback")).to_have_count(0)
