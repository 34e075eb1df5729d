"""The KV lab's per-head map in a real browser (issue 53): estimated and exact cells marked apart, and a Stop during
the exact confirmation that keeps what it confirmed."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.helpers import LOAD, settled


def test_the_head_map_marks_estimated_cells_and_a_stop_keeps_the_confirmed_ones(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/kv?example=english")
    settled(page)
    page.get_by_role("button", name="Measure every head").click()
    confirming = re.compile(r"^[1-9]\d* of \d+ heads near the threshold measured exactly")
    expect(page.get_by_text(confirming).first).to_be_visible(timeout=LOAD)  # estimated; at least a layer confirmed
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop").click()
    stopped = page.get_by_text(re.compile(r"^Stopped before every head near the threshold was measured exactly"))
    expect(stopped).to_be_visible(timeout=LOAD)
    settled(page)
    counts = page.get_by_text(re.compile(r"^(\d+) heads? measured exactly, (\d+) estimated to first order"))
    exact, estimated = (int(n) for n in re.match(r"^(\d+)\D+(\d+)", counts.inner_text()).groups())
    assert exact > 0 and estimated > 0  # both kinds of cell, counted
    chart = page.locator(".stPlotlyChart").filter(has_text="What each head alone costs")
    expect(chart.get_by_text("estimated to first order")).to_be_visible()  # the crossed cells' legend entry
    expect(page.get_by_test_id("stException")).to_have_count(0)
