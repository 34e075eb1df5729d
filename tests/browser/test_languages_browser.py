"""The app in French and Portuguese in a real browser: from the URL, from the browser's language, no errors."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect
from sinkscope.core import i18n

from tests.browser.helpers import LOAD, nav_entry

PAGES = {"": "explorer.title", "softmax": "softmax.title", "massive": "massive.title", "lab": "lab.title"}


def title_in(code: str, key: str) -> str:
    return i18n.catalogue(code)[key]


@pytest.mark.parametrize("code", ["fr", "pt"])
def test_pages_open_in_the_language_of_the_link(page: Page, app_url: str, code: str) -> None:
    for path, key in PAGES.items():
        page.goto(f"{app_url}/{path}?lang={code}&example=english")
        expect(page.get_by_role("heading", name=title_in(code, key), exact=True)).to_be_visible(timeout=LOAD)
        expect(page.get_by_test_id("stException")).to_have_count(0)
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text(title_in(code, "side.language")).first).to_be_visible(timeout=LOAD)  # after the title
    expect(nav_entry(page, title_in(code, "nav.why"), title_in(code, "nav.break"))).to_be_visible()


def test_the_softmax_page_in_portuguese_writes_decimal_commas(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/softmax?lang=pt")
    bars = page.locator(".stPlotlyChart").filter(has_text="softmax+1").first
    expect(bars).to_contain_text("soma 1,000", timeout=LOAD)
    box = page.get_by_label(title_in("pt", "softmax.scores"))
    expect(box).to_have_value("0,2; \u22120,1; 0,1; 0,0; \u22120,2; 0,1")  # a true minus sign
    box.fill("0; 0; 9,5; 0")
    box.press("Enter")
    expect(bars).to_contain_text("retido 0,000", timeout=LOAD)


def test_the_browser_language_is_the_default(browser: Browser, app_url: str) -> None:
    context = browser.new_context(locale="fr-FR")
    try:
        page = context.new_page()
        page.goto(f"{app_url}/streaming")
        expect(page.get_by_role("heading", name="Streaming avec des puits d'attention", exact=True)).to_be_visible(
            timeout=LOAD
        )
        page.get_by_test_id("stTopNav").get_by_role("link", name="Explorateur").click()
        expect(page.get_by_role("heading", name="Les puits d'attention, tête par tête", exact=True)).to_be_visible(
            timeout=LOAD
        )
        expect(page).to_have_url(re.compile(r"lang=fr"), timeout=LOAD)
    finally:
        context.close()
