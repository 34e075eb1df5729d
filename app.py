"""Sinkscope: see attention sinks in a real language model. Run with ``streamlit run serve.py``."""

import streamlit as st

from views.common import choose_language, settings
from views.site import PAGES
from views.text import t

st.set_page_config(page_title="Sinkscope", page_icon="🕳️", layout="wide")
if settings().hosted:
    st.set_option("client.showErrorDetails", "none")  # a public server shows no tracebacks
choose_language()  # before the page titles below: they are in the session's language
sections: dict[str, list[st.Page]] = {}
for page in PAGES:
    entry = st.Page(
        page.path, title=t(page.title), icon=page.icon, url_path=page.url_path or None, default=not page.url_path
    )
    sections.setdefault(t(page.section), []).append(entry)
st.navigation(sections).run()
