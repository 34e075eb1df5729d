"""The main flows in a real browser, as a user would do them."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Page, expect

from tests.browser.helpers import LOAD, one_head_title, open_one_head, wait_for_analysis


def test_the_app_opens_on_the_bundled_model_and_analyzes_typed_text(page: Page, app_url: str) -> None:
    page.goto(app_url)
    wait_for_analysis(page)
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text("SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)").first).to_be_visible()
    box = sidebar.get_by_label("Text")
    box.fill("Attention sinks collect the attention that has nowhere else to go.")
    box.press("Control+Enter")
    count = sidebar.get_by_text(re.compile(r"^\d+ tokens · limit"))
    expect(count.filter(has_text=re.compile(r"^5\d tokens"))).to_have_count(0, timeout=LOAD)  # the example is longer
    expect(count).to_have_count(1, timeout=LOAD)  # the sidebar loses the example's caption: wait for the new layout
    expect(sidebar.get_by_label("Example")).to_have_value("Your own text", timeout=LOAD)  # an edit makes it yours
    n_tokens = int(count.inner_text().split()[0])
    wait_for_analysis(page)
    expect(page.get_by_text(f"T = {n_tokens})")).to_be_visible(timeout=LOAD)


def test_scrubbing_and_looking_past_the_sink(page: Page, app_url: str) -> None:
    open_one_head(page, f"{app_url}/?layer=12&head=3")
    assert one_head_title(page).startswith("Layer 12, head 3")
    page.get_by_role("slider", name="Head").focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_text("Layer 12, head 4").first).to_be_visible(timeout=LOAD)
    expect(page).to_have_url(re.compile(r"head=4"))
    page.get_by_text("Look past the sink").click()
    expect(page.get_by_text("Layer 12, head 4: past the sink").first).to_be_visible(timeout=LOAD)


def test_a_shared_url_brings_back_the_same_view(page: Page, app_url: str) -> None:
    shared = f"{app_url}/?example=french&layer=9&head=2&metric=value_sink&log_scale=1"
    open_one_head(page, shared)
    assert one_head_title(page).startswith("Layer 9, head 2")
    expect(page.get_by_test_id("stSidebar").get_by_label("Text")).to_have_value(re.compile("^Le gardien du phare"))
    expect(page.get_by_role("switch", name="Log colour scale")).to_be_checked()
    page.get_by_role("tab", name="Head map").click()  # the metric from the link survived the other tab
    title = page.locator(".ss-head-map figcaption").filter(has_text=re.compile("^value sink: share of output"))
    expect(title.first).to_be_visible(timeout=LOAD)


def test_downloading_the_per_head_csv(page: Page, app_url: str) -> None:
    page.goto(app_url)
    wait_for_analysis(page)
    with page.expect_download() as download:
        page.get_by_role("button", name="Per-head CSV").click()
    lines = Path(download.value.path()).read_text(encoding="utf-8").splitlines()
    assert lines[0] == "layer,head,sink,diagonal,previous_token,entropy,value_sink,learned_sink,kind"
    assert len(lines) == 1 + 30 * 9


HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(1)> <b>bold</b> %{x}"


def test_hostile_text_shows_literally_and_runs_nothing(page: Page, app_url: str) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    open_one_head(page, f"{app_url}/?text={quote(HOSTILE)}")
    expect(page.get_by_test_id("stSidebar").get_by_label("Text")).to_have_value(HOSTILE)
    chart = page.locator(".stPlotlyChart").filter(has_text=re.compile(r"Layer \d+, head \d+")).first
    expect(chart.locator(".xtick text").first).to_be_attached(timeout=LOAD)
    ticks = chart.locator(".xtick text").all_text_contents()
    assert any("<" in tick for tick in ticks) and any("script" in tick for tick in ticks)
    injected = page.locator(".stPlotlyChart img, .stPlotlyChart script")
    assert injected.count() == 0, [e.evaluate("e => e.outerHTML.slice(0, 200)") for e in injected.all()]
    assert chart.locator(".xtick tspan, .ytick tspan").count() == 0  # markup in tokens made no styled spans
    page.wait_for_timeout(500)
    assert dialogs == []


def test_uploads_are_checked_and_read(page: Page, app_url: str) -> None:
    page.goto(app_url)
    wait_for_analysis(page)
    upload = page.get_by_test_id("stSidebar").locator("input[type=file]")
    upload.set_input_files(files=[{"name": "data.txt", "mimeType": "text/plain", "buffer": b"\x00\x01\x02"}])
    expect(page.get_by_text("'data.txt' looks like a binary file, not text.")).to_be_visible(timeout=LOAD)
    text = "A small uploaded essay about sinks."
    upload.set_input_files(files=[{"name": "essay.txt", "mimeType": "text/plain", "buffer": text.encode()}])
    expect(page.get_by_test_id("stSidebar").get_by_label("Text")).to_have_value(text, timeout=LOAD)


def test_the_streaming_page_streams_a_short_text(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/streaming")
    expect(page.get_by_role("button", name="Stream", exact=True)).to_be_visible(timeout=LOAD)
    page.get_by_role("slider", name="Tokens to stream").focus()
    page.keyboard.press("Home")  # the shortest stream, so the test runs in seconds ...
    page.get_by_role("slider", name="Recent window W").focus()
    page.keyboard.press("Home")  # ... with a cache small enough to fill
    page.get_by_role("button", name="Stream", exact=True).click()
    table = page.get_by_test_id("stDataFrame").first
    expect(table).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("Next-token loss while streaming").first).to_be_visible(timeout=LOAD)
