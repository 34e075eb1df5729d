"""The app's pages, in navigation order: one table that both the navigation and the web server read."""

from __future__ import annotations

from typing import NamedTuple


class Page(NamedTuple):
    section: str  # message key of the navigation section
    path: str
    title: str  # message key
    icon: str
    url_path: str  # "" for the default page


PAGES = (
    Page("nav.explore", "views/explorer.py", "nav.explorer", "🔎", ""),
    Page("nav.why", "views/why_softmax.py", "nav.softmax", "⚖️", "softmax"),
    Page("nav.why", "views/why_reads_nothing.py", "nav.reads_nothing", "🫙", "reads-nothing"),
    Page("nav.why", "views/why_massive.py", "nav.massive", "📈", "massive"),
    Page("nav.why", "views/why_diagonals.py", "nav.diagonals", "↘️", "diagonals"),
    Page("nav.why", "views/why_break.py", "nav.break", "🔨", "break"),
    Page("nav.experiments", "views/streaming.py", "nav.streaming", "🌊", "streaming"),
    Page("nav.experiments", "views/compare.py", "nav.compare", "🪞", "compare"),
    Page("nav.experiments", "views/census.py", "nav.census", "📊", "census"),
    Page("nav.experiments", "views/lab.py", "nav.lab", "🧪", "lab"),
    Page("nav.experiments", "views/claims.py", "claims.title", "✅", "claims"),
    Page("nav.experiments", "views/definitions.py", "definitions.title", "📖", "metrics"),
)
URL_PATHS = frozenset(page.url_path for page in PAGES if page.url_path) | {"explorer"}
