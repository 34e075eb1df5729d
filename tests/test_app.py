"""App tests: the pages run headless (streamlit.testing) against the real bundled model."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
from plotly.colors import get_colorscale, sample_colorscale
from sinkscope import lab
from sinkscope.core import texts
from sinkscope.core.i18n import Text
from sinkscope.core.names import HEAD_METRICS, TASK_VARIANTS
from streamlit.testing.v1 import AppTest

from tests.helpers import ROOT, TIMEOUT, array, chart, go_to, html_figure
from tests.tiny import build_word_model_dir
from views.state import cache, session

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them


@pytest.fixture
def app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def one_head() -> AppTest:
    """The explorer opened on its "One head" tab (only the open tab runs)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["tab_id"] = "one"
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., AppTest]]:
    """An app started under the given environment settings (the process-wide state is rebuilt)."""

    def start(**env: str) -> AppTest:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        cache.shared.clear()
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
        at.run()
        assert not at.exception, at.exception
        return at

    yield start
    cache.shared.clear()


def test_backend_never_imports_streamlit() -> None:
    for path in (ROOT / "backend" / "sinkscope").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "streamlit" for n in names), f"{path} imports streamlit"


def test_the_app_opens_on_the_bundled_model(app: AppTest) -> None:
    assert app.sidebar.selectbox(key="model_choice").value == "smollm2-135m"
    captions = " ".join(t.value for t in app.sidebar.text)
    assert "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)" in captions
    assert "float32" in captions and "cpu" in captions and "sinkscope" in captions
    assert "of heads" in app.metric[0].value


def test_empty_text_shows_a_message_and_keeps_the_previous_result(app: AppTest) -> None:
    app.sidebar.text_area(key="text").set_value("   ").run()
    assert not app.exception
    assert any("empty" in e.value for e in app.error)
    assert any("Showing the previous result" in c.value for c in app.caption)
    assert any("T = " in m.label for m in app.metric)
    assert "last_request" in app.session_state  # a session keeps its request; the result lives in the shared cache
    assert "last_analysis" not in app.session_state


def test_a_model_that_cannot_be_opened_is_one_error_at_the_top_of_the_stage_and_clears_it(
    app: AppTest, tmp_path: Path
) -> None:
    """The error and what to do stand first in the main area; the model before it leaves no figure behind."""
    broken = build_word_model_dir(tmp_path)
    (broken / "model.safetensors").write_bytes(b"")
    assert app.metric  # the sink rate of the model before
    app.sidebar.selectbox(key="model_choice").set_value("custom").run()
    for spec, message, remedy in [
        ("no such model", "Unknown model", "Pick a bundled model"),
        ("/no/such/model", "/no/such/model: No such file or directory", "Pick a bundled model"),
        (str(broken), "model.safetensors is empty", "Pick a bundled model"),
        ("someone/not-on-this-machine", "Could not open model 'someone/not-on-this-machine'", "hf download"),
    ]:
        app.sidebar.text_input(key="model_path").set_value(spec).run()
        assert not app.exception
        assert not app.sidebar.error and len(app.main.error) == 1
        assert message in app.main.error[0].value and remedy in app.main.error[0].value
        assert app.main.children[0].error  # the stage's first element: above the page's title
        assert not app.metric and not app.get("plotly_chart")  # no figure of the model before
        assert app.sidebar.text_area(key="text").value  # the visitor's text stays


def url_param(app: AppTest, key: str) -> str:
    value = app.query_params[key]
    return value[-1] if isinstance(value, list) else value


def test_the_head_map_colours_every_head_by_the_chosen_metric_with_all_five_in_hover(app: AppTest) -> None:
    table = app.dataframe[0].value  # the heads table: one row per (layer, head), its columns by display name
    named = Text("en").metric
    for metric in ("sink", "diagonal"):
        app.radio(key="metric").set_value(metric).run()
        figure = html_figure(app, "head_map")
        assert figure.title.startswith(f"{named(metric)}: ") and figure.texts["ss-bar-title"] == named(metric)
        values = figure.values()
        assert values.shape == (30, 9)
        np.testing.assert_allclose(values.ravel(), table[named(metric)].to_numpy(), atol=1e-6)
        layer, head = np.unravel_index(values.argmax(), values.shape)
        scale = "Reds" if metric == "sink" else "Viridis"  # Plotly's own scales, read from plotly.colors
        assert figure.fill(layer, head) == sample_colorscale(get_colorscale(scale), [float(values.max())])[0]
        tip = figure.cells[layer * 9 + head]["title"].splitlines()
        assert tip[0] == f"layer {layer}, head {head}" and tip[-1].startswith("kind: ")
        shown = [m for m in HEAD_METRICS if m != "learned_sink"]  # SmolLM2 has no learned sink logit
        assert [line.split(":")[0] for line in tip[1:-1]] == [named(m) for m in shown]


def test_the_kind_counts_stack_every_head_of_a_layer_by_its_kind(app: AppTest) -> None:
    table = app.dataframe[0].value
    figure = html_figure(app, "kind_counts")
    assert len(figure.bars) == 30 and figure.texts["ss-legend"] == "sink diagonal previous_token mixed"
    for layer in (0, 18, 29):
        counts = table[table["layer"] == layer]["kind"].value_counts()
        tip = dict(line.split(": ") for line in figure.bars[layer]["title"].splitlines()[1:])
        assert {kind: int(n) for kind, n in tip.items() if int(n)} == counts.to_dict()
        heights = [float(re.search(r"height:([\d.]+)%", part).group(1)) for part in figure.segments[layer]]
        assert sum(heights) == pytest.approx(100)


def test_the_two_thresholds_are_explained_with_this_texts_numbers(app: AppTest) -> None:
    caption = next(c.value for c in app.caption if c.value.startswith("Two thresholds"))
    assert "above eps (0.30): 70% here" in caption and "at least 0.5: 36% here" in caption


def test_eps_changes_the_sink_rate(app: AppTest) -> None:
    before = app.metric[0].value
    app.select_slider(key="eps").set_value(0.9).run()
    assert "eps = 0.90" in app.metric[0].label
    assert app.metric[0].value != before


def test_scrubbing_to_another_head_changes_the_one_head_map(one_head: AppTest) -> None:
    app = one_head
    app.slider(key="layer").set_value(3).run()
    app.slider(key="head").set_value(0).run()
    first = chart(app, "one_head_map")
    app.slider(key="head").set_value(1).run()
    second = chart(app, "one_head_map")
    assert first["layout"]["title"]["text"].startswith("Layer 3, head 0")
    assert second["layout"]["title"]["text"].startswith("Layer 3, head 1")
    assert not np.array_equal(array(first["data"][0]["z"]), array(second["data"][0]["z"]), equal_nan=True)
    assert url_param(app, "head") == "1"


def test_looking_past_the_sink_drops_the_first_key_and_renormalizes(one_head: AppTest) -> None:
    app = one_head
    app.toggle(key="past_sink").set_value(True).run()
    heat = chart(app, "one_head_map")["data"][0]
    assert not heat["x"][0].startswith("0:")
    rows = array(heat["z"]).astype(float)
    np.testing.assert_allclose(np.nansum(rows[1:], axis=1), 1.0, atol=1e-3)


def test_looking_past_the_sink_applies_to_what_the_head_reads_too(one_head: AppTest) -> None:
    app = one_head
    app.toggle(key="past_sink").set_value(True).run()
    for units in (False, True):
        app.toggle(key="value_units").set_value(units).run()
        read = chart(app, "value_weighted_map")
        assert "past the sink" in read["layout"]["title"]["text"]
        heat = read["data"][0]
        assert not heat["x"][0].startswith("0:")
        if not units:  # what it reads: each row a distribution over the keys past the sink
            np.testing.assert_allclose(np.nansum(array(heat["z"]).astype(float)[1:], axis=1), 1.0, atol=1e-3)


def test_changing_the_text_reruns_the_analysis(app: AppTest) -> None:
    app.sidebar.selectbox(key="example").set_value("custom").run()
    app.sidebar.text_area(key="text").set_value("Sinks appear in short texts too.").run()
    assert not app.exception
    assert any("T = " in m.label and "T = 58" not in m.label for m in app.metric)
    assert url_param(app, "text") == "Sinks appear in short texts too."


def test_a_shared_url_restores_the_view() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"example": "python", "layer": "7", "head": "4", "past_sink": "1", "tab_id": "one"})
    at.run()
    assert not at.exception
    assert at.sidebar.selectbox(key="example").value == "python"
    assert at.slider(key="layer").value == 7 and at.slider(key="head").value == 4
    assert at.toggle(key="past_sink").value is True
    assert chart(at, "one_head_map")["layout"]["title"]["text"].startswith("Layer 7, head 4: past the sink")
    assert chart(at, "layer_heads")["layout"]["yaxis"]["ticktext"] == [7]  # the strip is labelled with its layer


@pytest.mark.parametrize(
    ("params", "ignored"),
    [({"head": "-1", "eps": "inf"}, "head=-1, eps=inf"), ({"head": "-5", "eps": "5"}, "head=-5, eps=5"),
     ({"eps": "-1", "layer": "x"}, "layer=x, eps=-1"), ({"eps": "nan"}, "eps=nan")],
)  # fmt: skip
def test_a_link_with_values_out_of_range_shows_a_notice_not_a_traceback(params: dict, ignored: str) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(params | {"example": "english", "tab_id": "one"})
    at.run()
    assert not at.exception, at.exception
    assert ignored in at.sidebar.warning[0].value
    assert 0 <= at.slider(key="head").value <= 8 and "eps" not in at.session_state


def test_a_link_past_the_last_layer_is_clamped_to_it() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"example": "english", "layer": "999", "head": "99", "eps": "0.33", "tab_id": "one"})
    at.run()
    assert not at.exception and not at.sidebar.warning
    assert (at.slider(key="layer").value, at.slider(key="head").value) == (29, 8)
    assert at.session_state["eps"] == 0.35  # the slider's step


def test_one_head_opens_on_a_head_that_attends_to_the_sink_but_reads_little(one_head: AppTest) -> None:
    app = one_head
    layer, head = app.slider(key="layer").value, app.slider(key="head").value
    assert (layer, head) == (23, 3)  # SmolLM2, English: sink 0.79 but value_sink 0.31, not the pure sink 18/8
    shown = {m.label: m.value for m in app.metric}
    assert float(shown["sink score"]) > 0.5 and float(shown["sink score"]) - float(shown["value sink"]) > 0.3
    assert any("looks the same in both maps" in c.value for c in app.caption)


def test_only_the_open_tab_runs_and_the_link_keeps_it() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"example": "english", "tab_id": "all"})
    at.run()
    assert not at.exception
    assert chart(at, "all_heads") and not [e for e in at.get("bidi_component") if e.proto.id.endswith("-head_map")]
    assert url_param(at, "tab_id") == "all"
    at.query_params.clear()
    at.session_state["tab"] = "Depth profile"
    at.run()
    assert chart(at, "depth") and url_param(at, "tab_id") == "depth"


def test_editing_an_example_makes_the_text_your_own_and_the_link_carries_it(app: AppTest) -> None:
    edited = app.sidebar.text_area(key="text").value + " One more sentence."
    app.sidebar.text_area(key="text").set_value(edited).run()
    assert app.sidebar.selectbox(key="example").value == "custom"
    assert url_param(app, "text") == edited and "example" not in app.query_params
    assert "a link carries up to 1,500 characters" in " ".join(c.value for c in app.sidebar.caption)
    app.sidebar.text_area(key="text").set_value("word " * 400).run()
    assert "will not carry it" in " ".join(c.value for c in app.sidebar.caption)
    assert "text" not in app.query_params


def test_a_text_over_the_limit_offers_to_truncate(deployment: Callable[..., AppTest]) -> None:
    app = deployment(SINKSCOPE_MAX_TOKENS="64")
    long_text = session.EXAMPLES["english"]["text"] * 3
    app.sidebar.selectbox(key="example").set_value("custom").run()
    app.sidebar.text_area(key="text").set_value(long_text).run()
    assert not app.exception
    assert any("the limit is 64" in w.value for w in app.warning)
    assert app.sidebar.text_area(key="text").value == long_text  # nothing the user typed is lost
    app.button(key="truncate_button").click().run()
    assert any("T = 64)" in m.label for m in app.metric)


def test_hosted_mode_offers_only_the_bundled_models_and_a_lower_limit(deployment: Callable[..., AppTest]) -> None:
    app = deployment(SINKSCOPE_HOSTED="1")
    options = app.sidebar.selectbox(key="model_choice").options
    assert "custom" not in options and len(options) >= 1
    assert all("not installed" not in option for option in options)  # a visitor cannot install a model
    assert all("Other" not in option for option in options)
    assert any("limit 512" in c.value for c in app.sidebar.caption)
    uploader = app.sidebar.get("file_uploader")[0].proto
    assert "200 KB" in uploader.label and uploader.max_upload_size_mb == 1  # not the server's 5 MB
    assert any("stFileUploaderDropzoneInstructions" in h.proto.body for h in app.get("html"))  # its MB line hidden
    assert st.get_option("client.showErrorDetails") == "none"  # a public server shows no tracebacks
    app.sidebar.text_area(key="text").set_value("The keeper counts ships. " * 8_000).run()  # fits the box
    assert not app.exception
    assert any("more than 512 tokens" in w.value for w in app.warning)
    assert any(c.value == "more than 512 tokens · limit 512" for c in app.sidebar.caption)


def test_hosted_mode_ignores_a_model_path_in_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SINKSCOPE_HOSTED", "1")
    cache.shared.clear()
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
        at.query_params["model"] = "/etc"
        at.run()
        assert not at.exception
        assert at.sidebar.selectbox(key="model_choice").value == "smollm2-135m"
        assert not at.sidebar.text_input
    finally:
        cache.shared.clear()


def test_the_streaming_page_shows_sinks_rescuing_a_small_window() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    go_to(at, "streaming").run()
    assert not at.exception
    at.slider(key="stream_tokens").set_value(128)
    at.slider(key="stream_window").set_value(20)
    at.multiselect(key="stream_methods").set_value(["window", "sinks", "mask-window", "dense"])
    next(b for b in at.button if b.label == "Stream").click().run()
    assert not at.exception
    table = at.dataframe[0].value.set_index("S")
    window_ppl, sinks_ppl = table.loc[0, "perplexity"].iloc[0], table.loc[4, "perplexity"]
    assert sinks_ppl < window_ppl
    curves = chart(at, "stream_nll")["data"]
    assert len(curves) == 4
    next(b for b in at.button if b.label.startswith("Sweep")).click().run()
    bars = chart(at, "sweep_chart")["data"][0]
    assert list(bars["x"]) == ["0", "1", "2", "4", "8"]
    next(b for b in at.button if b.label.startswith("Generate")).click().run()
    prompt, *continued = [text.value for text in at.main.text if len(text.value) > 40]
    assert not at.exception and len(continued) == 2
    source = texts.builtin_text()  # the page streams Python's help text by default
    assert source.startswith(prompt) and source[len(prompt)].isspace()  # the prompt ends where a word does
    assert "Stop" not in [b.label for b in at.button]  # every run has ended: no Stop is left to press


def test_streaming_refuses_a_text_that_never_fills_the_cache() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    go_to(at, "streaming").run()
    at.slider(key="stream_tokens").set_value(64)
    at.slider(key="stream_window").set_value(60)
    next(b for b in at.button if b.label == "Stream").click().run()
    assert not at.exception
    assert "64 tokens never fill a cache of 64" in at.warning[0].value
    assert "stream_results" not in at.session_state


def test_the_training_lab_opens_on_shipped_runs_with_verdicts_and_retrains_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipped_softmax = lab.PolarizeRun.load(ROOT / "assets" / "lab" / "polarize" / "softmax-logistic-seed0.json")
    monkeypatch.setattr(lab, "polarize", None)  # the first visit trains nothing
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    go_to(at, "lab").run()
    assert not at.exception
    entropy = chart(at, "lab_entropy")["data"]
    assert {trace["name"] for trace in entropy} == {"softmax", "softmax+1", "sigmoid", "relu", "linear"}
    assert any(c.value.startswith("Shipped runs for softmax, softmax+1, sigmoid, ReLU, linear") for c in at.caption)
    assert array(entropy[0]["y"]).tolist() == shipped_softmax.entropy
    assert at.radio(key="lab_task").value == "backcopy"
    shipped = at.table[0].value.reset_index()
    named = {Text("en").variant(v) for v in TASK_VARIANTS} - {"linear"}  # by display name; linear did not learn
    assert len(shipped) == 10 and set(shipped["attention"]) == named
    verdicts = " ".join(m.value for m in at.markdown)
    assert "Softmax forms a sink" in verdicts and verdicts.count("Reproduces.") == 4  # not the gate: see the lab
    # C7: the shipped ReLU run ends one-hot; the page says so and why (dead units, not normalization)
    assert "near one-hot (entropy below half its start) for: softmax, softmax+1, ReLU;" in verdicts
    assert "stayed spread for: sigmoid, linear." in verdicts and "ReLU ends one-hot too" in verdicts
    assert "softmax+1 did park on BOS: seed 0 reached 0.95" in verdicts  # C9: a transient sink, said
    assert "no verdict reads them" not in verdicts  # every shipped run learned its task
    assert re.search(r"strongest head puts [\d.]+ \(L\dH\d, seed \d\) on BOS", verdicts)  # C8: whose number it is
    assert at.selectbox(key="train_shown").value == ("softmax", 0)  # the story starts on softmax
    assert chart(at, "train_bos")["layout"]["yaxis"]["title"]["text"] == "share of attention"
    at.selectbox(key="train_shown").set_value(("sigmoid", 0)).run()
    assert chart(at, "train_bos")["layout"]["yaxis"]["title"]["text"] == "raw weight (rows need not sum to 1)"
    at.select_slider(key="train_steps").set_value(250)
    at.selectbox(key="train_variant").set_value("sigmoid")
    at.number_input(key="train_seed").set_value(7)
    next(b for b in at.button if b.label == "Retrain live").click().run()
    assert not at.exception
    assert "Stop" not in [b.label for b in at.button]  # shown while training, gone once the run ends
    runs = at.table[0].value.reset_index().set_index(["attention", "seed"])
    assert len(runs) == 11 and ("sigmoid", 7) in runs.index
    live = at.session_state["lab_runs"][("backcopy", "sigmoid", 7)]
    said = " ".join(m.value for m in at.markdown)  # a live run that did not learn is named and gives no verdict
    assert (f"sigmoid seed 7 ({live.accuracy[-1]:.2f})" in said) == (not live.learned())
    at.radio(key="lab_task").set_value("induction").run()
    induction = at.table[0].value
    assert len(induction) == 8 and "(7" not in str(induction.values)  # the backcopy run stays with backcopy
    assert not at.exception


def test_a_hosted_lab_offers_only_the_allowed_training_lengths(deployment: Callable[..., AppTest]) -> None:
    at = deployment(SINKSCOPE_HOSTED="1", SINKSCOPE_MAX_LAB_STEPS="1500")
    go_to(at, "lab").run()
    assert not at.exception, at.exception
    assert max(at.select_slider(key="lab_steps").options, key=int) == "1000"
    assert at.select_slider(key="train_steps").options == ["250", "500", "1000"]
    assert at.select_slider(key="train_steps").value == 1000


def test_value_units_show_a_sink_head_writing_almost_nothing() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"example": "random", "layer": "18", "head": "8", "tab_id": "one"})
    at.run()
    normalized = array(chart(at, "value_weighted_map")["data"][0]["z"]).astype(float)
    at.toggle(key="value_units").set_value(True).run()
    scaled = chart(at, "value_weighted_map")
    assert scaled["layout"]["title"]["text"].startswith("What it writes")
    first_column = array(scaled["data"][0]["z"]).astype(float)[1:, 0]
    assert np.nanmedian(normalized[1:, 0]) > 0.9 and np.nanmedian(first_column) < 0.3
    heatmap = scaled["data"][0]  # one fixed scale, its unit named: the faint sink column stays faint
    assert (heatmap["zmin"], heatmap["zmax"]) == (0, 1) and heatmap["colorbar"]["title"]["text"].startswith("typical")


def test_a_link_naming_an_unknown_example_language_or_hosted_model_says_so_on_the_first_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"example": "nonesuch", "lang": "xx", "head": "-2"})
    at.run()
    assert not at.exception, at.exception
    assert [w.value for w in at.sidebar.warning] == [
        "This link asked for values the app cannot show, so they were left at their defaults: "
        "example=nonesuch, lang=xx, head=-2."
    ]
    monkeypatch.setenv("SINKSCOPE_HOSTED", "1")
    cache.shared.clear()
    try:
        hosted = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
        hosted.query_params.update({"model": "/etc"})
        hosted.run()
        assert not hosted.exception and "model=/etc" in hosted.sidebar.warning[0].value
    finally:
        cache.shared.clear()


def test_both_bad_sides_of_a_compare_link_are_named_on_the_first_load() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.clear()
    at.query_params.update({"a_example": "english", "a_bos": "maybe", "b_example": "english", "b_bos": "2"})
    go_to(at, "compare").run()
    assert not at.exception, at.exception
    notices = " ".join(w.value for w in at.warning).replace("\\", "")  # as markdown shows it: a\_bos is a_bos
    assert "a_bos=maybe" in notices and "b_bos=2" in notices


def test_no_page_calls_what_streamlit_removes_after_2026_06_01() -> None:
    """Issue 38, item 5: the server logged 24 warnings that st.components.v1.html will be removed; st.iframe now."""
    sources = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "views").rglob("*.py")}
    assert [name for name, source in sources.items() if "components.v1" in source] == []
