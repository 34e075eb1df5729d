"""Sinkscope: see attention sinks in a real language model. Run with ``streamlit run serve.py``.

The entry draws what every page shares once (the navigation and the sidebar) and hands the page its context.
"""

import streamlit as st

from views import frame
from views.site import pages
from views.state.session import ASSETS, choose_language, settings
from views.widgets import controls

st.set_page_config(page_title="Sinkscope", page_icon=str(ASSETS / "favicon.png"), layout="wide")  # no icon font fetched
if settings().hosted:
    st.set_option("client.showErrorDetails", "none")  # a public server shows no tracebacks
choose_language()  # before the page titles below: they are in the session's language
page = st.navigation(pages(), position="top")  # the sidebar holds the text, at its top
frame.enter(controls.sidebar())
page.run()
frame.say_notices()
