"""The main flows in a real browser, as a user would do them."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

LOAD = 180_000  # ms: the first run may dequantize the bundled model


def wait_for_analysis(page: Page) -> None:
    expect(page.get_by_text("of heads").first).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("Running the model")).to_have_count(0, timeout=LOAD)


def test_the_app_opens_on_the_bundled_model_and_analyzes_typed_text(page: Page, app_url: str) -> None:
    page.goto(app_url)
    wait_for_analysis(page)
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text("SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)").first).to_be_visible()
    box = sidebar.get_by_label("Text")
    box.fill("Attention sinks collect the attention that has nowhere else to go.")
    box.press("Control+Enter")
    count = sidebar.get_by_text(re.compile(r"^\d+ tokens · limit"))
    expect(count).not_to_have_text(re.compile(r"^5\d tokens"), timeout=LOAD)  # the example text is longer
    n_tokens = int(count.inner_text().split()[0])
    wait_for_analysis(page)
    expect(page.get_by_text(f"T = {n_tokens})")).to_be_visible(timeout=LOAD)
