"""Definitions: every number the app shows, as docs/metrics.md defines it (the page renders that file)."""

from pathlib import Path

import streamlit as st

from views.state import session, url_state
from views.text import language, t
from views.widgets import controls

DOCS = session.ROOT / "docs"


def definitions() -> Path:
    """docs/metrics.md, or its translation into the viewer's language (docs/metrics.fr.md, ...) where there is one."""
    translated = DOCS / f"metrics.{language()}.md"
    return translated if translated.exists() else DOCS / "metrics.md"


def page() -> None:
    """The project's metric definitions, in the app, so a hosted class can read them too."""
    st.title(t("definitions.title"))
    controls.sidebar()  # the shared sidebar stays drawn, so its text and choices survive a visit here
    st.caption(t("definitions.note"))
    body = definitions().read_text(encoding="utf-8").split("\n", 1)[1]  # the file's own heading is the title
    st.markdown(body)
    url_state.sync_url()
