"""The course's presenter view: no sidebar or app header, large text, one figure a screen for a projector."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

FIGURE_HEIGHT = 400  # pixels: with the step's question and answer, fits under 720 px of a projector
FIGURE_FONT = 16
CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stHeader"] {display: none;}
[data-testid="stMainBlockContainer"] {max-width: 100%; padding: 1rem 3rem 2rem 3rem;}
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li,
[data-testid="stMain"] label p {font-size: 1.3rem; line-height: 1.45;}
[data-testid="stMain"] h1 {font-size: 2.2rem; padding-top: 0;}
[data-testid="stMain"] h3 {font-size: 1.7rem;}
</style>"""


def presenting() -> bool:
    return bool(st.session_state.get("present"))


def apply() -> None:
    """Restyle this run's page for the projector."""
    st.html(CSS)


def projected(fig: go.Figure) -> go.Figure:
    """``fig`` sized and lettered for a projector when presenting; as it is otherwise."""
    if not presenting():
        return fig
    return go.Figure(fig).update_layout(height=FIGURE_HEIGHT, font={"size": FIGURE_FONT})
