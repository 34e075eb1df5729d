"""A model with a learned sink logit per head (a tiny gpt-oss) in the app: the ghost column, the head map, the
softmax lesson's link. The numbers are checked against the library's own analysis of the same text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from sinkscope.core.capture import analyze, attention_maps
from sinkscope.core.models import load_model
from streamlit.testing.v1 import AppTest

from tests.helpers import TIMEOUT, array, chart, go_to, html_figure
from tests.tiny import build_tiny_model_dir

pytestmark = pytest.mark.pages  # see pytest.ini: which worker, and whether make check runs them

ROOT = Path(__file__).resolve().parent.parent
TEXT = "Attention sinks park spare attention on the first token."


@pytest.fixture(scope="module")
def gpt_oss_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model_dir(tmp_path_factory.mktemp("tiny-gpt-oss"), family="gpt_oss"))


def opened(model: str, page: str = "", **params: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"model": model, "example": "custom", "text": TEXT, **params})
    go_to(at, page or "explorer").run()
    assert not at.exception, at.exception
    return at


def test_one_head_draws_the_learned_sink_as_a_ghost_column_left_of_the_first_token(gpt_oss_dir: str) -> None:
    app = opened(gpt_oss_dir, tab_id="one", layer="2", head="3")
    heat = chart(app, "one_head_map")["data"][0]
    assert heat["x"][0] == "◌ learned sink" and heat["x"][1].startswith("0:")
    loaded = load_model(gpt_oss_dir)
    trace = analyze(loaded, TEXT)
    maps = attention_maps(loaded, trace.token_ids, 2)
    rows = array(heat["z"]).astype(float)  # (query, [ghost, key 0, key 1, ...])
    np.testing.assert_allclose(rows[:, 0], maps.learned[3], atol=1e-6)
    np.testing.assert_allclose(np.nansum(rows, axis=1), 1.0, atol=1e-5)  # a row and its ghost: one unit
    shown = {m.label: m.value for m in app.metric}
    assert float(shown["learned sink"]) == pytest.approx(trace.heads["learned_sink"][2, 3], abs=1e-3)
    assert any("ghost column" in c.value for c in app.caption)


def test_the_head_map_can_be_coloured_by_the_learned_sink_only_where_there_is_one(
    gpt_oss_dir: str, tiny_dir: str
) -> None:
    app = opened(gpt_oss_dir)
    assert "learned sink" in app.radio(key="metric").options  # its display name
    app.radio(key="metric").set_value("learned_sink").run()
    trace = analyze(load_model(gpt_oss_dir), TEXT)
    np.testing.assert_allclose(html_figure(app, "head_map").values(), trace.heads["learned_sink"], atol=1e-3)
    assert "learned sink" not in opened(tiny_dir).radio(key="metric").options  # plain softmax: exactly 0


def test_the_softmax_lesson_shows_what_the_models_sink_logit_absorbs(gpt_oss_dir: str) -> None:
    app = opened(gpt_oss_dir, page="softmax")
    assert any("learnable sink logit" in box.value for box in app.info)
    html_figure(app, "sm_learned_map")  # the head map coloured by it


def test_a_refused_family_is_one_message_in_the_sidebar(tmp_path: Path) -> None:
    """RWKV has no attention (its time mixing is a recurrence): the app says so, naming it, and keeps the page."""
    torch.manual_seed(0)
    config = transformers.RwkvConfig(vocab_size=96, hidden_size=64, num_hidden_layers=2)
    transformers.RwkvForCausalLM(config).save_pretrained(tmp_path)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"model": str(tmp_path), "example": "custom", "text": TEXT})
    at.run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.sidebar.error] + [e.value for e in at.error]
    assert any("RWKV is not supported" in e and "recurrence" in e for e in errors), errors
