"""The explorer's first figures on the page: ``plot.head_map_html`` and ``plot.kind_counts_html`` in a small
component that shows hover text and reports a click on a head. They draw as soon as their elements arrive, with
no Plotly bundle to evaluate first."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import streamlit as st
from sinkscope import plot

from views.state.session import ASSETS
from views.text import language

_FIGURE = st.components.v2.component(
    "sinkscope_html_figure",
    html='<div class="ss-figure-root"></div>',
    css=plot.FIGURES_CSS,
    js=(ASSETS / "html_figure.js").read_text(encoding="utf-8"),
    isolate_styles=False,  # the page's own font and text colour, in the light and the dark theme
)


def head_map(heads: dict[str, np.ndarray], metric: str, key: str, on_click: Callable[[], None] | None = None) -> None:
    """The layer x head map of ``metric`` in the current container; ``on_click`` runs when a cell is clicked
    and reads the head from ``clicked_head(key)``."""
    data = {"html": plot.head_map_html(heads, metric, lang=language()), "clickable": on_click is not None}
    callbacks = {"on_clicked_change": on_click} if on_click else {}
    _FIGURE(key=key, data=data, **callbacks)


def clicked_head(key: str) -> tuple[int, int] | None:
    """(layer, head) of the cell just clicked in the head map ``key``, or None."""
    clicked = (st.session_state.get(key) or {}).get("clicked")
    return (int(clicked["layer"]), int(clicked["head"])) if clicked else None


def kind_counts(kinds: np.ndarray, key: str) -> None:
    """How many heads of each kind every layer has, as stacked bars, in the current container."""
    _FIGURE(key=key, data={"html": plot.kind_counts_html(kinds, lang=language()), "clickable": False})


def lit_text(tokens: list[str], row: np.ndarray, query: int, key: str, on_pick: Callable[[], None]) -> None:
    """The text coloured by one query's attention (``plot.lit_text_html``); ``on_pick`` runs when a token is clicked
    or picked with Enter, and reads it from ``picked_query(key)``."""
    html = plot.lit_text_html(tokens, row, query, lang=language())
    _FIGURE(key=key, data={"html": html, "clickable": True}, on_picked_change=on_pick)


def picked_query(key: str) -> int | None:
    """The position of the token just picked in the lit text ``key``, or None."""
    picked = (st.session_state.get(key) or {}).get("picked")
    return int(picked["query"]) if picked else None
