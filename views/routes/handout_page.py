"""Handout: one printable page for the sidebar's text, in the viewer's language, to download and print."""

from __future__ import annotations

import streamlit as st
from sinkscope.core.capture import Trace
from sinkscope.core.tokens import analyzed_part
from sinkscope.plot import handout, slides

from views.frame import Context
from views.state import session, url_state
from views.text import language, t
from views.widgets import charts, jobs, lessons, scoreboard

PREVIEW_HEIGHT = 900


def document(request: session.Request, trace: Trace) -> str:
    """The handout's HTML: the figures of this text, two example heads, the scoreboard and the definitions."""
    heads = {kind: ((layer, head), jobs.layer_maps(request, trace, layer).weights[head])
             for kind, (layer, head) in slides.example_heads(trace.heads).items()}  # fmt: skip
    verdicts = scoreboard.shown(request, trace, scoreboard.PROJECTED, keep=False)  # the verdicts as they land
    definitions = session.definitions_file(language()).read_text(encoding="utf-8")
    model = charts.model_name(request.model)
    read = analyzed_part(request.loaded.tokenizer, request.text, trace.token_ids)
    return handout.handout_html(trace, heads, verdicts, definitions, model, read, language(), cut=read != request.text)


def page(context: Context) -> None:
    """The handout of the sidebar's text: a download, and a preview of what prints."""
    st.title(t("handout.title"))
    st.markdown(t("handout.intro", pages=handout.PRINTED_PAGES))
    analysis = context.analysis()
    if analysis is not None:
        made = lessons.attempt(lambda: document(analysis.request, analysis.trace))
        if made is not None:
            st.download_button(t("handout.download"), made, "sinkscope-handout.html", "text/html", type="primary",
                               on_click="ignore", icon=":material/print:")  # fmt: skip
            st.caption(t("handout.preview"))
            st.iframe(made, height=PREVIEW_HEIGHT)  # our own page (the user's text escaped), scrolled inside
    url_state.sync_url()
