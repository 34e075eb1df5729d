"""Sinkscope: see attention sinks in a real language model. Run with ``streamlit run app.py``."""

import streamlit as st

st.set_page_config(page_title="Sinkscope", page_icon="🕳️", layout="wide")
pages = {
    "Explore": [st.Page("views/explorer.py", title="Explorer", icon="🔎", default=True)],
    "Why sinks exist": [
        st.Page("views/why_softmax.py", title="1. Softmax must spend one unit", icon="⚖️", url_path="softmax"),
        st.Page("views/why_reads_nothing.py", title="2. The sink reads nothing", icon="🫙", url_path="reads-nothing"),
        st.Page("views/why_massive.py", title="3. Massive activations", icon="📈", url_path="massive"),
        st.Page("views/why_diagonals.py", title="4. Sinks vs diagonals", icon="↘️", url_path="diagonals"),
        st.Page("views/why_break.py", title="5. Break the sink", icon="🔨", url_path="break"),
    ],
    "Experiments": [
        st.Page("views/streaming.py", title="Streaming", icon="🌊", url_path="streaming"),
        st.Page("views/lab.py", title="Training lab", icon="🧪", url_path="lab"),
    ],
}
st.navigation(pages).run()
