"""Training lab: watch softmax polarize, and sinks emerge while a tiny transformer trains."""

import streamlit as st

from views.frame import Context
from views.state import url_state
from views.text import t
from views.widgets import lab_polarization, lab_training


def page(_context: Context) -> None:  # the sidebar's text is not read here
    """Training lab: watch softmax polarize, and sinks emerge while a tiny transformer trains."""
    st.title(t("lab.title"))
    lab_polarization.section()
    lab_training.section()
    url_state.sync_url()
