"""The teacher's path in a real browser: what the explorer opens on, click-to-open, links, layout, Stop."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.helpers import LOAD, layout_problems, open_one_head, refitted, settled, wait_for_analysis

PAGES = ["?tab_id=map", "?tab_id=one", "?tab_id=all", "?tab_id=depth", "softmax", "reads-nothing", "massive",
         "diagonals", "break", "streaming", "lab", "claims", "metrics", "compare", "census",
         "course?step=1&answers=first"]  # fmt: skip


def test_one_head_opens_on_a_head_that_attends_but_reads_little(page: Page, app_url: str) -> None:
    open_one_head(page, f"{app_url}/?example=english")
    expect(page.get_by_text("Layer 23, head 3").first).to_be_visible(timeout=LOAD)  # sink 0.79, value_sink 0.31
    expect(page.get_by_text(re.compile("^A head that attends only to the first token looks the same"))).to_be_visible()
    strip = page.locator(".stPlotlyChart").filter(has_text="Every head of layer 23")
    expect(strip.locator(".ytick text")).to_have_text(["23"])  # the strip is labelled with its own layer


def test_hovering_a_head_map_cell_tells_its_numbers_and_a_click_opens_that_head(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/?example=english")
    wait_for_analysis(page)
    expect(page.get_by_text(re.compile(r"^Two thresholds, two questions")).first).to_be_visible()
    cell = page.locator('.ss-head-map [data-layer="18"][data-head="8"]')
    cell.hover()
    tip = page.locator(".ss-figure-tip:visible")
    expect(tip).to_be_visible(timeout=LOAD)
    expect(tip).to_have_text(
        re.compile(r"^layer 18, head 8\s+sink score: 1\.000\s+diagonal score: 0\.000\s+(.+\s+){3}kind: sink$")
    )  # no learned_sink: SmolLM2 has none
    cell.click()
    expect(page.get_by_role("tab", name="One head")).to_have_attribute("aria-selected", "true", timeout=LOAD)
    expect(page.get_by_text("Layer 18, head 8").first).to_be_visible(timeout=LOAD)
    expect(page).to_have_url(re.compile(r"layer=18.*head=8.*tab_id=one|tab_id=one.*layer=18"), timeout=LOAD)


def test_a_link_keeps_the_tab_and_an_edit_and_says_when_a_text_is_too_long(page: Page, app_url: str) -> None:
    open_one_head(page, f"{app_url}/?example=english&layer=5&head=2")
    expect(page).to_have_url(re.compile(r"tab_id=one"), timeout=LOAD)
    page.goto(page.url)  # the copied link opens where it was left
    expect(page.get_by_role("tab", name="One head")).to_have_attribute("aria-selected", "true", timeout=LOAD)
    expect(page.get_by_text("Layer 5, head 2").first).to_be_visible(timeout=LOAD)
    box = page.get_by_test_id("stSidebar").get_by_label("Text")
    box.fill("The keeper wrote the weather in his notebook.")
    box.press("Control+Enter")
    expect(page).to_have_url(re.compile(r"text=The\+keeper|text=The%20keeper"), timeout=LOAD)
    box.fill("word " * 400)
    box.press("Control+Enter")
    expect(
        page.get_by_text(re.compile("longer than 1,500 characters, so a copied link will not carry it"))
    ).to_be_visible(timeout=LOAD)


def test_a_link_holding_a_long_text_opens_the_app_with_the_text_not_a_reset_connection(
    page: Page, app_url: str
) -> None:
    """A 300,000-character link reaches the server in pieces, past uvicorn's 16 KB default (issue 38, item 4)."""
    text = "The keeper counts ships. " * 12_000
    page.goto(f"{app_url}/?text={quote(text)}")
    expect(page.get_by_text(re.compile("^The text has more than 2,048 tokens"))).to_be_visible(timeout=LOAD)
    assert page.get_by_test_id("stSidebar").get_by_label("Text").evaluate("box => box.value.length") == len(text)


def test_typed_scores_become_your_own_and_the_caption_follows_them(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/softmax")
    box = page.get_by_label("Attention scores of one query against its keys (q·k/√d)")
    expect(box).to_be_visible(timeout=LOAD)
    box.fill("0; 0; 9.5; 0")
    box.press("Enter")
    expect(page.get_by_role("radio", name="Your own scores")).to_be_checked(timeout=LOAD)
    expect(page.get_by_text(re.compile(r"here its strongest key gets 1\.000"))).to_be_visible(timeout=LOAD)


@pytest.mark.parametrize(
    "query", ["head=-1", "head=-5", "eps=inf", "eps=5", "eps=-1", "layer=999&head=999", "metric=bogus&tab_id=nope"]
)
def test_an_out_of_range_link_shows_a_notice_never_a_traceback(page: Page, app_url: str, query: str) -> None:
    page.goto(f"{app_url}/?example=english&{query}")
    wait_for_analysis(page)
    expect(page.get_by_test_id("stException")).to_have_count(0)
    if "999" not in query:  # a layer past the model's last is clamped to it, not refused
        expect(page.get_by_text(re.compile("^This link asked for values the app cannot show"))).to_be_visible()


def test_a_stopped_streaming_sweep_stops(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/streaming")
    settled(page)
    page.get_by_text("real streaming loop").click()
    page.get_by_role("button", name="Sweep S = 0, 1, 2, 4, 8").click()
    expect(page.get_by_text(re.compile(r"^every sink count side by side: \d+/\d+ tokens"))).to_be_visible(timeout=LOAD)
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop").click()
    expect(page.get_by_text(re.compile(r"side by side: \d+/\d+ tokens"))).to_have_count(0, timeout=30_000)
    settled(page)
    expect(page.get_by_test_id("stException")).to_have_count(0)
    expect(page.locator(".stPlotlyChart").filter(has_text="Perplexity with S sinks")).to_have_count(0)


@pytest.mark.parametrize("lang", ["en", "fr", "pt"])
def test_no_page_cuts_off_or_overlaps_its_text(browser: Browser, app_url: str, lang: str) -> None:
    """Every page at a laptop's 1440 px, then narrowed to a projector's 1024 px, in every language."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    try:
        page = context.new_page()
        found = {}
        for path in PAGES:
            page.set_viewport_size({"width": 1440, "height": 1000})
            page.goto(f"{app_url}/{path}{'&' if '?' in path else '?'}lang={lang}&example=english")
            settled(page)
            found[f"{path} at 1440"] = layout_problems(page)
            page.set_viewport_size({"width": 1024, "height": 1000})
            refitted(page)
            found[f"{path} at 1024"] = layout_problems(page)
        assert {path: problems for path, problems in found.items() if problems} == {}
    finally:
        context.close()
