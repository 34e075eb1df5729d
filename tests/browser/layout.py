"""What a reader sees cut off or overlapping on a page: text ending in an ellipsis, plot titles wider than
their figure, tick labels running into each other, a legend over an axis title, a table wider than its frame."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Locator, Page, expect

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
