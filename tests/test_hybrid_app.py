"""A hybrid (a tiny Jamba: Mamba layers 0 and 2, attention layers 1 and 3) in the library and the app: its attention
layers measured exactly, the others drawn as having no attention, refused by the scrub with that said, and skipped
by the census's rows and by interventions. The numbers are checked against transformers' own eager attention. Every
page that reads the model also runs on a family measured on the slow path (a tiny Bloom)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from sinkscope.census.files import window_rows
from sinkscope.census.runner import CensusWorker
from sinkscope.census.table import check_values
from sinkscope.core import metrics
from sinkscope.core.capture import analyze, attention_maps
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Text
from sinkscope.core.models import load_model
from sinkscope.core.names import HEAD_METRICS, NO_ATTENTION
from sinkscope.experiments import interventions, sink_heads
from sinkscope.experiments.claims import CLAIMS
from streamlit.testing.v1 import AppTest

from tests.helpers import TIMEOUT, array, chart, cli, go_to, html_figure
from tests.tiny import build_tiny_model_dir

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them

ROOT = Path(__file__).resolve().parent.parent
TEXT = "Attention sinks park spare attention on the first token."
ATTENTION = (1, 3)


@pytest.fixture(scope="module")
def jamba_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model_dir(tmp_path_factory.mktemp("tiny-jamba"), family="jamba"))


def opened(model: str, **params: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"model": model, "example": "custom", "text": TEXT, **params})
    go_to(at, "explorer").run()
    assert not at.exception, at.exception
    return at


def test_the_attention_layers_are_measured_exactly_and_the_others_have_no_heads(jamba_dir: str) -> None:
    loaded = load_model(jamba_dir)
    trace = analyze(loaded, TEXT)
    eager = transformers.AutoModelForCausalLM.from_pretrained(jamba_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        expected = eager(torch.tensor([trace.token_ids]), output_attentions=True, use_cache=False).attentions
    assert loaded.info.attention_layers == trace.attention_layers == ATTENTION and len(expected) == len(ATTENTION)
    for layer, maps in zip(ATTENTION, expected, strict=True):  # transformers returns the attention layers' maps
        measured = attention_maps(loaded, trace.token_ids, layer)
        np.testing.assert_allclose(measured.weights, maps[0].numpy(), atol=1e-5)
        scores = metrics.head_scores(maps[0].numpy(), measured.value_norms)
        for metric in HEAD_METRICS:
            np.testing.assert_allclose(trace.heads[metric][layer], scores[metric], atol=1e-5, err_msg=metric)
    assert np.isnan(trace.heads["sink"][[0, 2]]).all() and (trace.heads["kind"][[0, 2]] == NO_ATTENTION).all()
    assert np.isnan(trace.first_key[[0, 2]]).all() and np.isfinite(trace.first_key[[1, 3]]).all()
    assert {row["layer"] for row in trace.head_rows()} == set(ATTENTION)  # the census's and the CSV's rows
    finite = trace.heads["sink"][list(ATTENTION)]
    assert trace.sink_rate() == pytest.approx(100 * (finite > 0.3).mean())  # over the heads there are
    with pytest.raises(InputError, match="Layer 0 of Jamba has no attention"):
        attention_maps(loaded, trace.token_ids, 0)


def test_an_intervention_changes_the_attention_layers_and_skips_the_others(jamba_dir: str) -> None:
    loaded = load_model(jamba_dir)
    with interventions.intervene(loaded, interventions.DropFirst(1, layers=(0, 1, 2, 3))):
        dropped = analyze(loaded, TEXT)
    assert np.all(dropped.heads["sink"][list(ATTENTION)] == 0) and np.isnan(dropped.heads["sink"][[0, 2]]).all()


def test_the_head_map_leaves_the_layers_without_attention_empty_and_the_scrub_says_why(jamba_dir: str) -> None:
    app = opened(jamba_dir)
    cells = html_figure(app, "head_map").cells
    empty = [c for c in cells if c["data-layer"] in ("0", "2")]
    assert empty and all("transparent" in c["style"] and "no attention here" in c["title"] for c in empty)
    assert all("transparent" not in c["style"] for c in cells if c["data-layer"] in ("1", "3"))
    assert any("Jamba: structure found, not declared" in text.value for text in app.sidebar.text)  # the badge
    one = opened(jamba_dir, tab_id="one", layer="2", head="1")
    assert any(i.value.startswith("Layer 2 has no attention heads") and "1, 3" in i.value for i in one.info)
    sink = array(chart(opened(jamba_dir, tab_id="depth"), "depth")["data"][0]["y"]).astype(float)  # (layer,)
    assert np.isnan(sink[[0, 2]]).all() and np.isfinite(sink[list(ATTENTION)]).all()  # gaps where no attention


@pytest.fixture(scope="module")
def bloom_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model_dir(tmp_path_factory.mktemp("tiny-bloom"), family="bloom"))


PAGES = ["explorer", "explorer?tab_id=one", "explorer?tab_id=all", "explorer?tab_id=depth", "reads-nothing", "massive",
         "diagonals", "break", "streaming", "claims", "course", "origins", "kv"]  # fmt: skip


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("kind", ["jamba", "bloom"])  # a hybrid, and a family on the slow path
def test_every_page_that_reads_the_model_runs_on_a_hybrid_and_on_the_slow_path(
    request: pytest.FixtureRequest, kind: str, page: str
) -> None:
    model = request.getfixturevalue(f"{kind}_dir")
    path, _, query = page.partition("?")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"model": model, "example": "custom", "text": TEXT})
    at.query_params.update(dict(part.split("=") for part in query.split("&") if part))
    go_to(at, path).run()
    assert not at.exception, at.exception


@pytest.mark.parametrize("kind", ["jamba", "bloom"])
def test_a_census_window_of_a_hybrid_or_a_slow_family_reads_back_as_a_heads_table(
    request: pytest.FixtureRequest, kind: str
) -> None:
    """One window through the census's worker and writer (no Ray): the heads it has, every value checked."""
    model = request.getfixturevalue(f"{kind}_dir")
    ids = load_model(model).encode(TEXT)
    window = {"model": model, "doc_id": "d", "length": len(ids), "start": 0, "ids": ids, "problem": "",
              "doc_windows": 1}  # fmt: skip
    result = CensusWorker("cpu", "auto")({name: np.array([value], dtype=object) for name, value in window.items()})
    heads, _ = window_rows({name: values[0] for name, values in result.items()})
    table = check_values(heads.assign(model=kind, length=len(ids)), "heads")
    expected_layers = set(ATTENTION) if kind == "jamba" else {0, 1, 2, 3}
    assert set(table["layer"]) == expected_layers and table["sink"].notna().all()


def test_the_scoreboard_of_a_slow_family_says_once_why_its_runs_are_refused(bloom_dir: str) -> None:
    """Bloom refuses interventions: the scoreboard's four runs on the text fail alike, so it says so once, and its
    claims that need no intervention still get verdicts."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"model": bloom_dir, "example": "custom", "text": TEXT})
    go_to(at, "claims").run()
    refused = Text("en")("error.slow_intervention", family="Bloom")
    assert [e.value for e in at.error].count(refused) == 1, [e.value for e in at.error]
    board = at.table[0].value
    assert len(board) == len(CLAIMS) and board.iloc[:, 0].str.len().min() > 0


def test_the_command_line_drops_the_first_key_only_where_there_is_attention(jamba_dir: str, tmp_path: Path) -> None:
    """Issue 54: a Mamba layer's NaN entered the mean sink score, and the change was said of layers 0,1."""
    report = tmp_path / "out.json"
    done = cli("intervene", "--model", jamba_dir, "--text", "the sink takes attention . the head", "--drop-first",
               "1", "--json", str(report))  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(report.read_text(encoding="utf-8"))
    dropped = found["interventions"][0]
    assert dropped["label"] == "drop the first key in layers 1,3" and "nan" not in done.stdout
    assert np.isfinite(found["intact"]["mean_sink"]) and dropped["sink_per_layer"][0] is None
    alone = cli("intervene", "--model", jamba_dir, "--text", "the sink", "--drop-first", "1", "--layers", "0")
    assert alone.returncode == 2 and "none of these layers has attention" in alone.stderr


def test_the_break_page_greys_out_the_sink_map_a_hybrid_cannot_measure_and_says_why(jamba_dir: str) -> None:
    """Issue 54, item 1: the per-head sink map edits each head's mask as the KV lab does, which a hybrid refuses;
    the button is greyed out with the reason under it before anyone presses it."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"model": jamba_dir, "example": "custom", "text": TEXT})
    go_to(at, "break").run()
    assert next(button for button in at.button if button.key == "br_heads_run").disabled
    said = sink_heads.refusal(load_model(jamba_dir), 8).message.text()
    assert "Jamba" in said and said in [caption.value for caption in at.caption]
