"""Read back a figure of ``sinkscope.plot.html_figures`` as the page gets it: texts, cells, bars, colours."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import numpy as np
from streamlit.testing.v1 import AppTest


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
