"""Sinkscope: see attention sinks in a real language model. Run with ``streamlit run app.py``."""

import streamlit as st

st.set_page_config(page_title="Sinkscope", page_icon="🕳️", layout="wide")
pages = [
    st.Page("views/explorer.py", title="Explorer", icon="🔎", default=True),
    st.Page("views/streaming.py", title="Streaming", icon="🌊", url_path="streaming"),
    st.Page("views/lab.py", title="Training lab", icon="🧪", url_path="lab"),
]
st.navigation(pages).run()
