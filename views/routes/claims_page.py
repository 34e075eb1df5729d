"""Claims scoreboard: every claim of the papers, the published number, this model's, and a computed verdict."""

from __future__ import annotations

import streamlit as st
from sinkscope.experiments import claims

from views.frame import Context
from views.state import url_state
from views.text import say, t
from views.widgets import scoreboard


def page(context: Context) -> None:
    """Claims scoreboard: each claim measured on the sidebar's model and text, or on the lab's runs."""
    st.title(t("claims.title"))
    st.markdown(t("claims.intro"))
    analysis = context.analysis()
    if analysis is not None:
        scoreboard.shown(analysis.request, analysis.trace)
        st.caption(say(claims.how()))
    url_state.sync_url()
