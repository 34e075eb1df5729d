"""Every Plotly figure on a page: in the viewer's language, with a PNG and an SVG of it for slides.

The images are made only when their button is clicked (Plotly's static export drives Chromium: seconds, not
worth spending on every rerun); each carries a caption line naming the model, the text and what it shows.
"""

from __future__ import annotations

import time

import plotly.graph_objects as go
import streamlit as st
from sinkscope.core.bundled import BUNDLED, shown_label
from sinkscope.core.i18n import Message
from sinkscope.plot import export
from sinkscope.plot.explore_figures import room_for_title

from views import frame
from views.text import language, local_figure, say, t

MIME = {"png": "image/png", "svg": "image/svg+xml"}


def model_name(spec: str) -> str:
    """The model's label in the viewer's language (a bundled model's "dequantized to float32" translated)."""
    return shown_label(BUNDLED[spec].label, language()) if spec in BUNDLED else spec


def caption(fig: go.Figure, on: Message | None = None) -> str:
    """The caption line of ``fig``: the model and the text it was drawn from (the page's request, or what ``on`` says
    it was computed on instead), and the figure's title."""
    request = frame.current().request
    model = model_name(request.model) if request is not None else ""
    drawn_from = say(on) if on is not None else request.text if request is not None else ""
    return export.caption_line(model, drawn_from, export.plain_title(fig))


def computed_on(on: Message, where: object = st) -> None:
    """The one line beside a figure, a table or a verdict that is not computed on the visitor's text."""
    where.caption(":material/dataset: " + say(on))


class Draft:
    """A figure redrawn in one place while its run lasts (at most every ``every`` seconds, no downloads): the run's
    result so far; the page draws the finished figure itself."""

    def __init__(self, key: str, every: float = 2.0) -> None:
        self.slot, self.key, self.every, self.drawn, self.count = st.empty(), key, every, 0.0, 0

    def draw(self, fig: go.Figure) -> None:
        now = time.monotonic()
        if now - self.drawn >= self.every:
            self.drawn, self.count = now, self.count + 1
            self.slot.plotly_chart(local_figure(room_for_title(fig)), key=f"{self.key}_{self.count}")

    def clear(self) -> None:
        self.slot.empty()


def downloads(fig: go.Figure, key: str, where: object = st, on: Message | None = None) -> None:
    """A small menu under a figure: its PNG and its SVG, made when clicked."""
    with where.popover(t("export.figure"), icon=":material/download:"):
        if not export.available():
            st.caption(t("export.no_browser"))
            return
        shown, line = local_figure(fig), caption(fig, on)
        for fmt in export.FORMATS:
            made = lambda fmt=fmt: export.image(shown, fmt, line)  # noqa: E731
            st.download_button(fmt.upper(), made, f"{key}.{fmt}", MIME[fmt], key=f"{key}_{fmt}", on_click="ignore")


def show(fig: go.Figure, key: str, where: object = st, height: str = "content", on: Message | None = None) -> None:
    """``fig`` in ``where`` (the page, a column), in the viewer's language, with its downloads; ``height="stretch"``
    fills what its column leaves. A figure not computed on the visitor's text says what it is ``on``, in a line
    under it and in its downloads' caption."""
    where.plotly_chart(local_figure(room_for_title(fig)), key=key, height=height)
    if on is not None:
        computed_on(on, where)
    downloads(fig, key, where, on)
