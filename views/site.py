"""The app's pages, in navigation order: one table that both the navigation and the web server read."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import streamlit as st

from views.routes import (
    break_page,
    census_page,
    claims_page,
    compare_page,
    course_page,
    diagonals_page,
    explorer_page,
    handout_page,
    kv_page,
    lab_page,
    massive_page,
    metrics_page,
    origins_page,
    reads_nothing_page,
    softmax_page,
    streaming_page,
)
from views.state import navigation
from views.text import t


class Route(NamedTuple):
    section: str  # message key of the navigation section
    render: Callable[[], None]  # draws the page
    title: str  # message key
    icon: str
    url_path: str


DEFAULT = "explorer"  # the page "/" opens; it also answers at /explorer
ROUTES = (
    Route("nav.explore", explorer_page.page, "nav.explorer", "🔎", DEFAULT),
    Route("nav.explore", course_page.page, "nav.course", "🎓", "course"),
    Route("nav.explore", handout_page.page, "nav.handout", "🖨️", "handout"),
    Route("nav.why", softmax_page.page, "nav.softmax", "⚖️", "softmax"),
    Route("nav.why", reads_nothing_page.page, "nav.reads_nothing", "🫙", "reads-nothing"),
    Route("nav.why", massive_page.page, "nav.massive", "📈", "massive"),
    Route("nav.why", origins_page.page, "nav.origins", "🧬", "origins"),
    Route("nav.why", diagonals_page.page, "nav.diagonals", "↘️", "diagonals"),
    Route("nav.why", break_page.page, "nav.break", "🔨", "break"),
    Route("nav.experiments", streaming_page.page, "nav.streaming", "🌊", "streaming"),
    Route("nav.experiments", kv_page.page, "nav.kv", "🗜️", "kv"),
    Route("nav.experiments", compare_page.page, "nav.compare", "🪞", "compare"),
    Route("nav.experiments", census_page.page, "nav.census", "📊", "census"),
    Route("nav.experiments", lab_page.page, "nav.lab", "🧪", "lab"),
    Route("nav.experiments", claims_page.page, "claims.title", "✅", "claims"),
    Route("nav.experiments", metrics_page.page, "definitions.title", "📖", "metrics"),
)
URL_PATHS = frozenset(route.url_path for route in ROUTES)


def pages() -> dict[str, list[st.Page]]:
    """The navigation's sections of pages, titled in this run's language; each page is also remembered by its URL
    path, for links between pages."""
    sections: dict[str, list[st.Page]] = {}
    by_url: dict[str, st.Page] = {}
    for route in ROUTES:
        page = st.Page(route.render, title=t(route.title), icon=route.icon, url_path=route.url_path,
                       default=route.url_path == DEFAULT)  # fmt: skip
        sections.setdefault(t(route.section), []).append(page)
        by_url[route.url_path] = page
    navigation.remember(by_url)
    return sections
