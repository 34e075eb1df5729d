"""What the browser tests share, in one module: starting a server and waiting for it, finding a page in the
navigation, waiting for an analysis or for a page to settle, and what a reader sees cut off or overlapping (text
ending in an ellipsis, plot titles wider than their figure, tick labels running into each other, a legend over an axis
title, a table wider than its frame)."""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-results"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
LOAD = 180_000  # ms: the first run may dequantize the bundled model
PROBLEMS_JS = (Path(__file__).parent / "layout.js").read_text(encoding="utf-8")
CHARTS_DRAWN = """() => [...document.querySelectorAll(".stPlotlyChart")]
    .every(chart => chart.querySelector(".main-svg .gtitle, .main-svg .xtick"))"""  # titled or ticked: laid out
CHARTS_FIT = """() => [...document.querySelectorAll(".stPlotlyChart")].every(chart => {
    const svg = chart.querySelector(".main-svg");
    return svg && svg.getBoundingClientRect().width <= chart.getBoundingClientRect().width + 1; })"""


def nav_entry(page: Page, section: str, title: str) -> Locator:
    """A page's entry in the app's top navigation, its section's menu opened first."""
    page.get_by_test_id("stTopNavSection").filter(has_text=section).click()
    return page.get_by_test_id("stTopNavDropdownLink").filter(has_text=title)


def settled(page: Page, timeout: float = 240_000, sidebar: bool = True) -> None:
    """Wait until the app has finished running this page (Streamlit's own script-state flag) and drawn its charts;
    ``sidebar=False`` for the presenter view, which hides the sidebar and the navigation."""
    if sidebar:
        expect(page.get_by_test_id("stTopNav")).to_be_visible(timeout=timeout)
    else:
        expect(page.get_by_test_id("stMainBlockContainer")).to_be_visible(timeout=timeout)
    expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning", timeout=timeout)
    page.wait_for_function(CHARTS_DRAWN, timeout=timeout)  # plotly draws after the script ends


def refitted(page: Page, timeout: float = 30_000) -> None:
    """After the window narrows: wait until every chart fits its narrower frame (Plotly redraws on resize)."""
    page.wait_for_function(CHARTS_FIT, timeout=timeout)


def layout_problems(page: Page) -> list[str]:
    return page.evaluate(PROBLEMS_JS)


def wait_for_analysis(page: Page) -> None:
    expect(page.get_by_text("of heads").first).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("Running the model")).to_have_count(0, timeout=LOAD)


def one_head_title(page: Page) -> str:
    chart = page.locator(".stPlotlyChart").filter(has_text=re.compile(r"Layer \d+, head \d+")).first
    return chart.locator(".gtitle").text_content() or ""


CLICKS = 3


def click_until(page: Page, target: Locator, arrived: Locator, gone: bool = False) -> None:
    """Click ``target`` until ``arrived`` shows (or, ``gone``, until it has gone). Under the suite's two workers a
    click is sometimes lost (issue 54), so once the page has settled without arriving, click again."""
    settled(page)  # a click while a run still draws can be lost in its rerun
    for attempt in range(CLICKS):
        target.click()
        try:
            reached(arrived, gone, 30_000)
            return
        except AssertionError:
            settled(page)
            try:
                reached(arrived, gone, 1_000)  # the click took, only slowly: a second would go a step too far
                return
            except AssertionError:
                if attempt == CLICKS - 1:
                    raise


def reached(arrived: Locator, gone: bool, timeout: float) -> None:
    if gone:
        expect(arrived).to_have_count(0, timeout=timeout)
    else:
        expect(arrived.first).to_be_visible(timeout=timeout)


def open_one_head(page: Page, url: str) -> None:
    page.goto(url)
    wait_for_analysis(page)
    click_until(page, page.get_by_role("tab", name="One head"), page.get_by_role("tab", name="One head", selected=True))
    expect(page.get_by_text(re.compile(r"Layer \d+, head \d+")).first).to_be_visible(timeout=LOAD)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError("streamlit did not become healthy")
