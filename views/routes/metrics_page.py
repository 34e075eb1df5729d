"""Definitions: every number the app shows, as docs/metrics.md defines it (the page renders that file)."""

import streamlit as st

from views.frame import Context
from views.state import session, url_state
from views.text import language, t


def page(_context: Context) -> None:  # the sidebar's text is not read here
    """The project's metric definitions, in the app, so a hosted class can read them too."""
    st.title(t("definitions.title"))
    st.caption(t("definitions.note"))
    body = session.definitions_file(language()).read_text(encoding="utf-8").split("\n", 1)[1]  # its title is ours
    st.markdown(body)
    url_state.sync_url()
