"""Where attention goes, key by key: the key_sink map of an analysis and the keys that receive most besides the first
(the explorer's map tab and the origins page)."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from sinkscope.core.capture import Trace
from sinkscope.core.names import KEY_COLUMNS
from sinkscope.findings import origins
from sinkscope.plot import fig_key_map

from views.text import language, plain, say, t
from views.widgets import charts

RECEIVERS = 3  # the keys named under the map


def key_map(trace: Trace, key: str) -> None:
    """The map (the first token's column can be left out, to see the rest), the keys named, and keys.csv."""
    skip = st.toggle(t("origins.skip_first"), key=f"{key}_skip_first", help=t("origins.skip_first_help"))
    charts.show(fig_key_map(trace.key_sink, list(trace.tokens), lang=language(), skip_first=skip), key)
    receivers = origins.receivers(trace, RECEIVERS, skip_first=trace.n_tokens > 1)
    if receivers:
        st.markdown(t("origins.receivers_heading"))
        st.markdown("\n".join(f"- {plain(say(receiver.said()))}" for receiver in receivers))
    rows = pd.DataFrame(trace.key_rows(), columns=list(KEY_COLUMNS)).to_csv(index=False)
    st.download_button(t("origins.keys_csv"), rows, "keys.csv", key=f"{key}_csv", on_click="ignore")
