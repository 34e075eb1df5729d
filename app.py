"""Sinkscope: see attention sinks in a real language model. Run with ``streamlit run app.py``."""

import streamlit as st

st.set_page_config(page_title="Sinkscope", page_icon="🕳️", layout="wide")
st.navigation([st.Page("pages/explorer.py", title="Explorer", icon="🔎", default=True)]).run()
