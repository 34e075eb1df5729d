"""Sinkscope: see attention sinks in a real language model. Run with ``streamlit run app.py``."""

import streamlit as st

from views.common import choose_language
from views.text import t

st.set_page_config(page_title="Sinkscope", page_icon="🕳️", layout="wide")
choose_language()  # before the page titles below: they are in the session's language
pages = {
    t("nav.explore"): [st.Page("views/explorer.py", title=t("nav.explorer"), icon="🔎", default=True)],
    t("nav.why"): [
        st.Page("views/why_softmax.py", title=t("nav.softmax"), icon="⚖️", url_path="softmax"),
        st.Page("views/why_reads_nothing.py", title=t("nav.reads_nothing"), icon="🫙", url_path="reads-nothing"),
        st.Page("views/why_massive.py", title=t("nav.massive"), icon="📈", url_path="massive"),
        st.Page("views/why_diagonals.py", title=t("nav.diagonals"), icon="↘️", url_path="diagonals"),
        st.Page("views/why_break.py", title=t("nav.break"), icon="🔨", url_path="break"),
    ],
    t("nav.experiments"): [
        st.Page("views/streaming.py", title=t("nav.streaming"), icon="🌊", url_path="streaming"),
        st.Page("views/lab.py", title=t("nav.lab"), icon="🧪", url_path="lab"),
        st.Page("views/claims.py", title=t("claims.title"), icon="✅", url_path="claims"),
        st.Page("views/definitions.py", title=t("definitions.title"), icon="📖", url_path="metrics"),
    ],
}
st.navigation(pages).run()
