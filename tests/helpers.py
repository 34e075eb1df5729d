"""What the tests share, in one module: opening a page of the app in AppTest, reading what it drew (charts, the
HTML figures), the bundled model's traces, and the command line in this process. Tiny random models live in
``tests.tiny``; the browser tests' own helpers in ``tests.browser.helpers``.

The pages are callables given to ``st.Page``; AppTest's ``switch_page`` finds file pages only. A callable page's
id is the hash of its URL path (``st.Page._script_hash``), so the next run opens it, with no first run needed.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from sinkscope.cli import main
from sinkscope.core.capture import Trace, analyze
from sinkscope.core.names import HEAD_METRICS
from sinkscope.course import STEPS
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from views.site import URL_PATHS

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 180  # s: the first run may dequantize the bundled model


def go_to(at: AppTest, url_path: str) -> AppTest:
    """Make ``at``'s next run open the page at ``url_path`` ("softmax", "lab", ...)."""
    assert url_path in URL_PATHS, f"no page at /{url_path}"
    at._page_hash = calc_hash(url_path)  # what AppTest.switch_page sets for a file page
    return at


@dataclass
class HtmlFigure:
    title: str = ""
    texts: dict[str, str] = field(default_factory=dict)  # class of an axis title or tick block -> its text
    cells: list[dict[str, str]] = field(default_factory=list)  # the attributes of every head map cell
    bars: list[dict[str, str]] = field(default_factory=list)  # the attributes of every layer's bar
    segments: list[list[str]] = field(default_factory=list)  # each bar's part styles, bottom first

    def values(self) -> np.ndarray:
        """(layer, head) of the cells' exact values."""
        shape = (1 + max(int(c["data-layer"]) for c in self.cells), 1 + max(int(c["data-head"]) for c in self.cells))
        return np.array([float(c["data-value"]) for c in self.cells]).reshape(shape)  # row by row

    def fill(self, layer: int, head: int) -> str:
        cell = next(c for c in self.cells if (c["data-layer"], c["data-head"]) == (str(layer), str(head)))
        return re.search(r"background:([^;]+)", cell["style"]).group(1)


def read(markup: str) -> HtmlFigure:
    reader = _Reader()
    reader.feed(markup)
    return reader.figure


def html_figure(app: AppTest, key: str) -> HtmlFigure:
    """The figure the component keyed ``key`` sends to the browser."""
    for element in app.get("bidi_component"):
        if element.proto.id.endswith(f"-{key}"):
            return read(json.loads(element.proto.json)["html"])
    raise KeyError(key)


class _Reader(HTMLParser):
    TEXTS = ("ss-x-title", "ss-y-title", "ss-x-ticks", "ss-y-ticks", "ss-bar-title", "ss-legend")

    def __init__(self) -> None:
        super().__init__()
        self.figure, self.open = HtmlFigure(), []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if "data-head" in found:
            self.figure.cells.append(found)
        elif "data-layer" in found:
            self.figure.bars.append(found)
            self.figure.segments.append([])
        elif tag == "i" and self.figure.bars and self.open and self.open[-1] == "bar":
            self.figure.segments[-1].append(found.get("style", ""))
        self.open.append("bar" if "data-layer" in found and "data-head" not in found else found.get("class", tag))

    def handle_endtag(self, tag: str) -> None:
        self.open.pop()

    def handle_data(self, data: str) -> None:
        inside = [name for name in self.open if name in self.TEXTS or name == "figcaption"]
        if inside and inside[-1] == "figcaption":
            self.figure.title += data
        elif inside:
            self.figure.texts[inside[-1]] = (self.figure.texts.get(inside[-1], "") + " " + data).strip()


def chart(app: AppTest, key: str) -> dict:
    """The Plotly figure a chart element sends to the browser."""
    for element in app.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        if element.proto.id.endswith(key) or key in element.proto.id:
            return spec
    raise KeyError(key)


def array(value: object) -> np.ndarray:
    """A Plotly data array: plain JSON lists, or the typed {dtype, bdata, shape} form Plotly 6+ sends."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = [int(n) for n in str(value.get("shape", flat.size)).split(",")]
        return flat.reshape(shape)
    return np.array(value, dtype=float)


def open_page(page: str, example: str = "english") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"example": example})
    go_to(at, page).run()
    assert not at.exception, at.exception
    return at


def submit(at: AppTest, label: str) -> AppTest:
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception, at.exception
    return at


def opened(page: str, lang: str, example: str, **params: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"lang": lang, "example": example, **params})
    go_to(at, page).run()
    assert not at.exception, at.exception
    return at


def revealed(step_id: str, lang: str, example: str) -> AppTest:
    """The course opened on a step, its first choice answered: the answer revealed."""
    index = next(i for i, step in enumerate(STEPS) if step.id == step_id)
    answers = ".".join([""] * index + [STEPS[index].choices[0]])
    return opened("course", lang, example, step=str(index + 1), answers=answers)


def course_step(step_id: str, lang: str, example: str) -> str:
    """The revealed step's sentences (its first choice answered), as one text."""
    return " ".join(m.value for m in revealed(step_id, lang, example).markdown)


def synthetic(residual: np.ndarray, key_sink: np.ndarray) -> Trace:
    """A Trace of hand-built states (layer + 1, token, d_model) and key_sink (layer, token)."""
    n_layers, n_tokens = key_sink.shape
    norms = np.linalg.norm(residual, axis=-1)
    layers = {"first_norm_ratio": norms[:, 0] / np.median(norms, axis=1)}
    heads = {"sink": np.zeros((n_layers, 1))}
    tokens = tuple(f"t{i}" for i in range(n_tokens))
    return Trace("m", tuple(range(n_tokens)), tokens, heads, layers, (), residual, np.zeros((n_layers, 1, n_tokens)),
                 key_sink)  # fmt: skip


def english(smollm2: object) -> Trace:
    examples = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))
    return analyze(smollm2, next(e["text"] for e in examples if e["id"] == "english"))


def cli(*args: str) -> subprocess.CompletedProcess:
    """``sinkscope ARGS`` in this process (no interpreter and torch start per call): exit status and output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(args))
        except SystemExit as stop:  # argparse's usage errors
            status = stop.code
    return subprocess.CompletedProcess(["sinkscope", *args], status, out.getvalue(), err.getvalue())


def heads_table(rows: int = 540) -> pd.DataFrame:
    """Two windows of a 30 x 9 model, as a census writes them."""
    rng = np.random.default_rng(0)
    table = pd.DataFrame({
        "model": "smollm2-135m", "length": 128, "doc_id": np.repeat(["a", "b"], rows // 2), "start": 0,
        "layer": np.tile(np.repeat(np.arange(30), 9), 2)[:rows], "head": np.tile(np.arange(9), rows // 9)[:rows],
        **{metric: rng.random(rows) for metric in HEAD_METRICS}, "kind": "sink",
    })  # fmt: skip
    return table


def many_rows(n_rows: int, group: int = 1_000_000) -> bytes:
    """A heads table of n_rows constant rows, in row groups of ``group``: kilobytes of Parquet (the hostile
    upload of the issue), built a row group at a time."""
    first = heads_table().iloc[0]
    text = lambda value: pa.DictionaryArray.from_arrays(np.zeros(group, np.int8), [value])  # noqa: E731
    columns = {name: text(first[name]) if isinstance(first[name], str) else pa.array(np.full(group, first[name]))
               for name in heads_table().columns}  # fmt: skip
    chunk = pa.table(columns)
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, chunk.schema, compression="zstd", max_rows_per_page=group) as writer:
        for _ in range(n_rows // group):
            writer.write_table(chunk)
    return buffer.getvalue()
