"""A slider over decimal values whose thumb and ends are written the viewer's way (0,30 in French and Portuguese).

``st.slider``'s ``format`` is a JavaScript sprintf pattern and cannot write a decimal comma; a select slider over
the same values, each written by ``views.text.num``, can.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from views.state.session import KEEP
from views.state.url_state import EPS_RANGE, EPS_STEP
from views.text import num


def steps(low: float, high: float, step: float) -> list[float]:
    """low, low + step, ..., high, rounded so that a value from a link or an earlier run matches one exactly."""
    return [round(low + i * step, 10) for i in range(round((high - low) / step) + 1)]


def decimal_slider(
    where: DeltaGenerator, label: str, values: Sequence[float], value: float, key: str, spec: str = ".2f"
) -> float:
    """A select slider over ``values`` starting at ``value`` (or at the session's own value, moved to the nearest
    of them), each written with ``spec`` in the viewer's language."""
    held = st.session_state.get(key, value)
    st.session_state[key] = min(values, key=lambda candidate: abs(candidate - held))
    return where.select_slider(label, list(values), format_func=partial(num, spec=spec), key=key,
                               persist_state=KEEP)  # fmt: skip


EPS_STEPS = steps(*EPS_RANGE, EPS_STEP)  # the sink-rate threshold's values, the ones a link may carry
