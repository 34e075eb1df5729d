"""The course's presenter view: no sidebar or app header, large text, one figure a screen for a projector."""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go
import streamlit as st

FIGURE_ROOM = "100vh - 21rem"  # the screen below the title, the question and above the figure menu and buttons
SMALLEST = 300  # pixels: a stretched figure's height at least (it grows with its column, ROOM tall)
FIGURE_FONT = 20  # pixels: tick labels a room can read from the back (at least 18 px on a 1080p projector)
TITLE_WIDTH = 48  # characters a title line holds in the presenter's wide figure column
CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stHeader"] {display: none;}
[data-testid="stMainBlockContainer"] {max-width: 100%; padding: 1rem 3rem 2rem 3rem;}
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li,
[data-testid="stMain"] label p,
[data-testid="stMain"] table {font-size: clamp(1.3rem, 1.45vw, 2rem); line-height: 1.45;}
[data-testid="stMain"] h1 {font-size: clamp(2.2rem, 2.4vw, 3.2rem); padding-top: 0;}
[data-testid="stMain"] h3 {font-size: clamp(1.7rem, 1.9vw, 2.6rem);}
[data-testid="stColumn"]:has(.stPlotlyChart) {min-height: calc(ROOM);}
</style>"""


def presenting() -> bool:
    return bool(st.session_state.get("present"))


def apply() -> None:
    """Restyle this run's page for the projector."""
    st.html(CSS.replace("ROOM", FIGURE_ROOM))


def rewrapped(title: str) -> str:
    """A heading's lines rewrapped to the presenter's wide column (fewer, longer lines); its subtitle kept."""
    main, subtitle, rest = title.partition("<br><span")
    return "<br>".join(textwrap.wrap(main.replace("<br>", " "), TITLE_WIDTH)) + subtitle + rest


def projected(fig: go.Figure) -> go.Figure:
    """``fig`` sized and lettered for a projector when presenting; as it is otherwise."""
    if not presenting():
        return fig
    big = {"size": FIGURE_FONT}
    shown = go.Figure(fig).update_layout(height=SMALLEST, autosize=True, font=big, title_font=big, legend_font=big,
                                         title_text=rewrapped(fig.layout.title.text or ""))  # fmt: skip
    if not any(trace.type == "heatmap" for trace in shown.data):  # a heatmap's title has its room already
        shown.update_layout(title={"automargin": True, "yref": "container"})  # a wrapped title clears the plot
    shown.update_xaxes(tickfont=big, title_font=big).update_yaxes(tickfont=big, title_font=big)
    shown.update_annotations(font=big)
    return shown.update_traces(colorbar={"tickfont": big, "title": {"font": big}}, selector={"type": "heatmap"})


def figure_height() -> str:
    """A figure fills the column the presenter view makes tall; elsewhere it keeps its own height."""
    return "stretch" if presenting() else "content"
