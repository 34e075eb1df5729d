"""Sinkscope: see attention sinks in a real language model. Run with ``streamlit run serve.py``."""

import streamlit as st

from views.site import pages
from views.state.session import choose_language, settings

st.set_page_config(page_title="Sinkscope", page_icon="🕳️", layout="wide")
if settings().hosted:
    st.set_option("client.showErrorDetails", "none")  # a public server shows no tracebacks
choose_language()  # before the page titles below: they are in the session's language
st.navigation(pages(), expanded=True).run()  # every page listed: a course needs no "View more"
