"""Choosing a head: layer and head sliders that start on the head that teaches, and a head's kind in its colour."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st
from sinkscope.core.capture import Trace
from sinkscope.core.names import KIND_THRESHOLD
from sinkscope.plot import KIND_COLORS

from views.state.session import KEEP
from views.text import coloured, kind_label, t


def clamp(key: str, largest: int) -> None:
    """Keep a restored or remembered slider value inside this model's range."""
    st.session_state[key] = min(max(st.session_state.get(key, 0), 0), largest)


def reads_little(trace: Trace) -> np.ndarray:
    """(layer, head) scores whose largest is the clearest "attends to the first token but reads little from it"
    head (sink above the kind threshold, largest sink - value_sink); without one, the strongest sink."""
    sink, value_sink = trace.heads["sink"], trace.heads["value_sink"]
    return np.where(sink > KIND_THRESHOLD, sink - value_sink, sink - 1)


def pick_head(trace: Trace) -> tuple[int, int]:
    """Layer and head sliders that stay inside this model's range.

    They start on the head that teaches the lesson (``reads_little``): a pure sink head would show the same
    map twice, attention and what it reads, and tell a student that it reads everything from the sink.
    """
    n_layers, n_heads = trace.shape
    score = reads_little(trace)
    strongest = np.unravel_index(np.nan_to_num(score, nan=-np.inf).argmax(), trace.shape)
    st.session_state.setdefault("layer", int(strongest[0]))
    st.session_state.setdefault("head", int(strongest[1]))
    clamp("layer", n_layers - 1)
    clamp("head", n_heads - 1)
    pick = st.columns(2)
    layer = pick[0].slider(t("common.layer"), 0, n_layers - 1, key="layer", persist_state=KEEP)
    return layer, pick[1].slider(t("common.head"), 0, n_heads - 1, key="head", persist_state=KEEP)


def kind_cell(container: Any, kind: str) -> None:
    """A head's kind under its label, in the kind's chart colour (a metric's large type cuts long names off)."""
    container.caption(t("explorer.kind"))
    container.markdown(coloured(kind_label(kind), KIND_COLORS[kind]), unsafe_allow_html=True)
