"""The compare and census pages in a real browser: a preset, an uploaded census, a broken upload."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from playwright.sync_api import Page, expect

from tests.browser.helpers import LOAD, settled

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "census" / "pydoc-smollm2"


def test_a_compare_preset_fills_both_sides_and_the_link(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/compare")
    settled(page)
    expect(page.get_by_text(re.compile(r"^A: sink rate")).first).to_be_visible(timeout=LOAD)
    page.get_by_label("Preset").click()
    page.get_by_role("option", name="Prose vs code").click()
    settled(page)
    expect(page).to_have_url(re.compile(r"b_example=python"), timeout=LOAD)
    expect(page.get_by_text("B − A: sink").first).to_be_visible(timeout=LOAD)


def test_an_uploaded_census_is_shown_and_a_broken_one_is_explained(page: Page, app_url: str, tmp_path: Path) -> None:
    heads = pd.read_parquet(SHIPPED / "heads")
    upload = tmp_path / "small.parquet"
    heads[heads["doc_id"].isin(sorted(heads["doc_id"].unique())[:8])].to_parquet(upload)
    (tmp_path / "broken.parquet").write_bytes(b"this is not a parquet file")
    page.goto(f"{app_url}/census")
    settled(page)
    page.get_by_label("Census", exact=True).click()
    page.get_by_role("option", name="Upload a Parquet file").click()
    settled(page)
    page.get_by_test_id("stMainBlockContainer").locator("input[type=file]").set_input_files(
        str(tmp_path / "broken.parquet")
    )
    expect(page.get_by_text(re.compile("Cannot read the census broken.parquet"))).to_be_visible(timeout=LOAD)
    heads.assign(sink="high").to_parquet(tmp_path / "typed.parquet")  # a string where numbers belong
    page.get_by_test_id("stMainBlockContainer").locator("input[type=file]").set_input_files(
        str(tmp_path / "typed.parquet")
    )
    expect(page.get_by_text(re.compile(r"typed\.parquet: the column sink holds \w+, not number"))).to_be_visible(
        timeout=LOAD
    )
    page.get_by_test_id("stMainBlockContainer").locator("input[type=file]").set_input_files(str(upload))
    settled(page)
    expect(page.get_by_text(re.compile(r"^Sink rate \(eps = 0.3\) against")).first).to_be_visible(timeout=LOAD)
    expect(page.get_by_test_id("stMetricValue").nth(1)).to_have_text("8")
