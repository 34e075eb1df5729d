"""The app's pages as Streamlit knows them, by URL path: a page links another without importing it."""

from __future__ import annotations

import streamlit as st

_pages: dict[str, st.Page] = {}  # url path -> the page app.py registered; the same for every session


def remember(pages: dict[str, st.Page]) -> None:
    """Called by app.py with the pages it gave ``st.navigation`` on this run."""
    _pages.update(pages)


def page_at(url_path: str) -> st.Page:
    """The registered page behind ``url_path`` ("explorer", "metrics", ...), for ``st.page_link``."""
    return _pages[url_path]
