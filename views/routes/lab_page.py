"""Training lab: watch softmax polarize, and sinks emerge while a tiny transformer trains."""

import streamlit as st

from views.state import url_state
from views.text import t
from views.widgets import controls, lab_polarization, lab_training


def page() -> None:
    """Training lab: watch softmax polarize, and sinks emerge while a tiny transformer trains."""
    st.title(t("lab.title"))
    controls.sidebar()  # the shared sidebar stays drawn, so its text and choices survive a visit here
    lab_polarization.section()
    lab_training.section()
    url_state.sync_url()
