"""App tests: the pages run headless (streamlit.testing) against the real bundled model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 180  # the first run may dequantize the bundled model


@pytest.fixture
def app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    return at


def test_backend_never_imports_streamlit() -> None:
    for path in (ROOT / "backend").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "streamlit" for n in names), f"{path} imports streamlit"


def test_the_app_opens_on_the_bundled_model(app: AppTest) -> None:
    assert app.sidebar.selectbox(key="model_choice").value == "smollm2-135m"
    captions = " ".join(c.value for c in app.sidebar.caption)
    assert "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)" in captions
    assert "float32" in captions and "cpu" in captions and "sinkscope" in captions
    assert "of heads" in app.metric[0].value


def test_empty_text_shows_a_message_and_keeps_the_app_alive(app: AppTest) -> None:
    app.sidebar.text_area(key="text").set_value("   ").run()
    assert not app.exception
    assert any("empty" in e.value for e in app.error)


def test_an_unknown_model_shows_a_message(app: AppTest) -> None:
    app.sidebar.selectbox(key="model_choice").set_value("custom").run()
    app.sidebar.text_input(key="model_path").set_value("/no/such/model").run()
    assert not app.exception
    assert any("Unknown model" in e.value for e in app.sidebar.error)
