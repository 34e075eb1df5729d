"""Runs first on a fresh server: a shared link to a page goes through app.py's navigation, cleanly."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import nav_entry
from views.site import DEFAULT, ROUTES


def test_a_first_visit_to_a_page_link_shows_the_app_navigation(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/lab")
    nav = page.get_by_test_id("stTopNav")
    expect(nav.get_by_text("Explorer")).to_be_visible(timeout=180_000)
    expect(nav_entry(page, "Experiments", "Training lab")).to_be_visible()
    expect(nav.get_by_text("common")).to_have_count(0)


@pytest.mark.parametrize("url_path", ["" if r.url_path == DEFAULT else r.url_path for r in ROUTES])  # "/": default
def test_a_direct_link_to_any_page_logs_no_console_error(page: Page, app_url: str, url_path: str) -> None:
    """Streamlit's page would first look for its server under the link's path (two 404s): serve.py says where."""
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("response", lambda reply: problems.append(f"{reply.status} {reply.url}") if reply.status >= 400 else None)
    page.goto(f"{app_url}/{url_path}")
    expect(page.get_by_test_id("stTopNav")).to_be_visible(timeout=180_000)
    page.wait_for_load_state("networkidle")  # every request the page makes has been answered
    assert not problems
