"""The app's pages, in navigation order: one table that both the navigation and the web server read. The explorer and
the course stand alone in the bar; the six lessons are numbered in their menu; the reference pages share one."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import streamlit as st

from views import frame
from views.frame import Context
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
    section: str  # message key of the navigation section ("" for a page of its own in the bar)
    render: Callable[[Context], None]  # draws the page from the context the entry hands it
    title: str  # message key
    icon: str  # a Material Symbol: drawn from Streamlit's own font, never as an emoji the browser may lack
    url_path: str


DEFAULT = "explorer"  # the page "/" opens; it also answers at /explorer
ROUTES = (
    Route("", explorer_page.page, "nav.explorer", ":material/search:", DEFAULT),
    Route("", course_page.page, "nav.course", ":material/school:", "course"),
    Route("nav.why", softmax_page.page, "nav.softmax", ":material/balance:", "softmax"),
    Route("nav.why", reads_nothing_page.page, "nav.reads_nothing", ":material/visibility_off:", "reads-nothing"),
    Route("nav.why", massive_page.page, "nav.massive", ":material/trending_up:", "massive"),
    Route("nav.why", origins_page.page, "nav.origins", ":material/genetics:", "origins"),
    Route("nav.why", diagonals_page.page, "nav.diagonals", ":material/south_east:", "diagonals"),
    Route("nav.why", break_page.page, "nav.break", ":material/build:", "break"),
    Route("nav.experiments", streaming_page.page, "nav.streaming", ":material/waves:", "streaming"),
    Route("nav.experiments", kv_page.page, "nav.kv", ":material/memory:", "kv"),
    Route("nav.experiments", compare_page.page, "nav.compare", ":material/compare:", "compare"),
    Route("nav.experiments", census_page.page, "nav.census", ":material/bar_chart:", "census"),
    Route("nav.experiments", lab_page.page, "nav.lab", ":material/science:", "lab"),
    Route("nav.reference", claims_page.page, "claims.title", ":material/fact_check:", "claims"),
    Route("nav.reference", metrics_page.page, "definitions.title", ":material/menu_book:", "metrics"),
    Route("nav.reference", handout_page.page, "nav.handout", ":material/print:", "handout"),
)
URL_PATHS = frozenset(route.url_path for route in ROUTES)


def handed(render: Callable[[Context], None]) -> Callable[[], None]:
    """A page as Streamlit calls it (no arguments), handed the context the entry made on this run."""

    def run() -> None:
        render(frame.current())

    run.__name__ = render.__module__.rsplit(".", 1)[-1]  # Streamlit names a callable page after its function
    return run


def pages() -> dict[str, list[st.Page]]:
    """The navigation's sections of pages, titled in this run's language; each page is also remembered by its URL
    path, for links between pages."""
    sections: dict[str, list[st.Page]] = {}
    by_url: dict[str, st.Page] = {}
    for route in ROUTES:
        page = st.Page(handed(route.render), title=t(route.title), icon=route.icon, url_path=route.url_path,
                       default=route.url_path == DEFAULT)  # fmt: skip
        sections.setdefault(t(route.section) if route.section else "", []).append(page)
        by_url[route.url_path] = page
    navigation.remember(by_url)
    return sections
