"""Runs first on a fresh server: a shared link to a page must go through app.py's navigation."""

from __future__ import annotations

from playwright.sync_api import Page, expect


def test_a_first_visit_to_a_page_link_shows_the_app_navigation(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/lab")
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav.get_by_text("Training lab")).to_be_visible(timeout=180_000)
    expect(nav.get_by_text("Explorer")).to_be_visible()
    expect(nav.get_by_text("common")).to_have_count(0)
