"""A Stop button shown only while its run lasts: a click reruns the page, which ends the run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from views.text import t


@contextmanager
def while_running(key: str, help_key: str) -> Iterator[None]:
    """Show Stop for the duration of the block, then take it away: a Stop left after the run ends does nothing."""
    slot = st.empty()
    slot.button(t("stream.stop"), key=key, help=t(help_key))
    try:
        yield
    finally:
        slot.empty()
