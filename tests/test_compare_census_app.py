"""App tests of the compare and census pages (headless), and the census page's numbers on hand-built tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from plotly.colors import get_colorscale, sample_colorscale
from sinkscope.census import stats as census_stats
from sinkscope.core.bundled import DEFAULT_MODEL
from sinkscope.core.capture import analyze_ids
from sinkscope.core.metrics import sink_rate
from streamlit.testing.v1 import AppTest

from tests.helpers import ROOT, TIMEOUT, array, chart, go_to, html_figure
from views.routes import compare_page
from views.state import cache

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them

SHIPPED = ROOT / "assets" / "census" / "pydoc-smollm2"


def open_page(page: str, **params: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.clear()
    at.query_params.update(params)  # as a direct link to the page would carry them
    go_to(at, page).run()
    assert not at.exception, at.exception
    return at


def ids_with_bos(loaded: object, text: str) -> list[int]:
    tokenizer = loaded.tokenizer
    return [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]


def test_compare_opens_with_and_without_bos_on_one_scale_with_a_difference_map(smollm2: object) -> None:
    at = open_page("compare")
    assert at.selectbox(key="compare_preset").value == "bos"
    assert at.toggle(key="a_add_bos").value and not at.toggle(key="b_add_bos").value
    a, b = (html_figure(at, key) for key in ("a_head_map", "b_head_map"))
    reds = get_colorscale("Reds")  # one scale, 0 to 1, on both sides: a colour means the same value
    for side in (a, b):
        layer, head = np.unravel_index(side.values().argmax(), side.values().shape)
        assert side.fill(layer, head) == sample_colorscale(reds, [float(side.values().max())])[0]
    with_bos = analyze_ids(smollm2, ids_with_bos(smollm2, at.text_area(key="a_text").value))
    diff = array(chart(at, "diff_map")["data"][0]["z"])
    np.testing.assert_allclose(diff, b.values() - a.values(), atol=1e-6)
    np.testing.assert_allclose(a.values(), with_bos.heads["sink"], atol=1e-5)
    assert at.selectbox(key="a_example").value == at.selectbox(key="b_example").value == "english"
    assert at.query_params["a_bos"] in ("1", ["1"]) and at.query_params["b_bos"] in ("0", ["0"])


def test_the_length_curve_is_the_sink_rate_of_each_prefix_run_on_its_own(smollm2: object) -> None:
    at = open_page("compare", a_example="english", b_example="python", a_bos="1", b_bos="1")
    assert at.text_area(key="b_text").value.startswith("def moving_average")
    curve = chart(at, "compare_by_length")["data"][0]
    lengths, rates = array(curve["x"]).astype(int), array(curve["y"])
    assert lengths[0] == compare_page.MIN_PREFIX and len(lengths) > 10
    ids = ids_with_bos(smollm2, at.text_area(key="a_text").value)
    assert lengths[-1] == len(ids)
    for index in (0, len(lengths) // 2):
        direct = analyze_ids(smollm2, ids[: lengths[index]]).heads["sink"]
        assert rates[index] == pytest.approx(sink_rate(direct, 0.3), abs=1e-9)
    by_eps = chart(at, "compare_by_eps")["data"][0]
    assert array(by_eps["y"])[0] >= array(by_eps["y"])[-1]  # a higher threshold never counts more heads


def test_a_preset_changes_both_sides_and_the_link_keeps_them() -> None:
    at = open_page("compare")
    at.selectbox(key="compare_preset").set_value("repeated").run()
    assert at.selectbox(key="b_example").value == "repeated"
    assert at.query_params["b_example"] in ("repeated", ["repeated"])
    again = open_page("compare", **{k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()})
    assert again.selectbox(key="b_example").value == "repeated"
    assert again.text_area(key="b_text").value.startswith("the the the")


def test_two_different_models_compare_on_relative_depth_without_a_difference_map(tiny_dir: str) -> None:
    at = open_page("compare", a_model=DEFAULT_MODEL, b_model=tiny_dir, a_example="english", b_example="english")
    assert at.info and "No difference map" in at.info[0].value
    assert "relative depth" in chart(at, "compare_depth")["layout"]["xaxis"]["title"]["text"]
    assert "diff_map" not in [element.key for element in at.get("plotly_chart")]


def test_a_side_over_the_hosted_limit_says_so_and_the_other_side_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("SINKSCOPE_MAX_TOKENS", "40")
    cache.shared.clear()
    try:
        at = open_page("compare", a_example="english", b_text="A short text.")
        assert any("40" in warning.value for warning in at.warning)
        assert at.button(key="a_truncate_button")
        at.button(key="a_truncate_button").click().run()
        assert not at.exception and chart(at, "diff_map")
    finally:
        cache.shared.clear()


def hand_built(rates: dict[str, list[float]], n_heads: int = 10) -> pd.DataFrame:
    """One model, length 64, one window per document; document d has ``rates[d]`` percent of heads over eps."""
    rows = []
    for doc, (rate,) in rates.items():
        sinking = round(rate / 100 * n_heads)
        for head in range(n_heads):
            sinks = head < sinking
            rows.append({"model": "m", "length": 64, "doc_id": doc, "start": 0, "layer": head % 2, "head": head,
                         "sink": 0.9 if sinks else 0.1, "kind": "sink" if sinks else "mixed"})  # fmt: skip
    return pd.DataFrame(rows)


def test_census_rates_average_documents_and_the_interval_holds_their_mean() -> None:
    heads = hand_built({"d1": [20.0], "d2": [40.0], "d3": [60.0], "d4": [80.0]})
    table = census_stats.rate_by_length(heads, eps=0.3)
    assert table["rate"].tolist() == [50.0] and table["docs"].tolist() == [4]
    assert 20.0 <= table["low"][0] < 50.0 < table["high"][0] <= 80.0
    steady = census_stats.steady_sinks(heads, eps=0.3, share=0.9)  # heads 0 and 1 sink in every document
    assert steady[["layer", "head"]].values.tolist() == [[0, 0], [1, 1]]
    assert len(census_stats.steady_sinks(heads, eps=0.3, share=0.7)) == 4  # heads 2 and 3 in three of four
    kinds = census_stats.kinds_by_layer(heads, "m", 64)
    assert kinds.loc[0, "sink"] == pytest.approx((1 + 2 + 3 + 4) / 20)  # layer 0 holds heads 0, 2, 4, 6, 8


def test_the_census_page_opens_on_the_shipped_census() -> None:
    heads = pd.read_parquet(SHIPPED / "heads")
    at = open_page("census")
    rate = chart(at, "census_rate")["data"][0]
    assert array(rate["x"]).astype(int).tolist() == [128, 512, 1024]
    expected = census_stats.rate_by_length(heads.astype({"model": str, "length": int}), 0.3)
    np.testing.assert_allclose(array(rate["y"]), expected["rate"], atol=1e-9)
    assert at.metric[1].value == "64"
    assert chart(at, f"spread_{DEFAULT_MODEL}") and chart(at, f"kinds_{DEFAULT_MODEL}")


def test_the_census_page_reads_a_folder_and_says_what_is_wrong_with_a_bad_one(tmp_path: Path) -> None:
    at = open_page("census")
    at.selectbox(key="census_source").set_value("folder").run()
    at.text_input(key="census_folder").set_value(str(tmp_path)).run()
    assert at.info and "heads/" in at.info[0].value
    broken = tmp_path / "heads" / "model=m" / "length=8"
    broken.mkdir(parents=True)
    (broken / "part-0.parquet").write_bytes(b"not parquet")
    at.text_input(key="census_folder").set_value(str(tmp_path) + "/").run()
    assert not at.exception and at.error and "Cannot read the census" in at.error[0].value
    at.text_input(key="census_folder").set_value(str(SHIPPED)).run()
    assert chart(at, "census_rate")


def test_a_hosted_census_page_offers_only_shipped_censuses_and_uploads(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("SINKSCOPE_HOSTED", "1")
    cache.shared.clear()
    try:
        at = open_page("census")
        assert at.selectbox(key="census_source").options == ["Shipped: pydoc-smollm2", "Upload a Parquet file"]
    finally:
        cache.shared.clear()
