"""One frame for every page: the entry (app.py) draws what every page shares once, the sidebar, and hands each page
its context: the request, the loaded model, and the analysis when the page asks for it.

A model that cannot load clears the stage: the error and what to do stand at the top of the main area, and no page
shows another model's figures under its name (``Context.analysis`` is None without a request).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

import streamlit as st
from sinkscope.core.errors import SinkscopeError, TokenLimitError
from sinkscope.core.folders import looks_local
from sinkscope.core.models import HUB_ID
from streamlit.delta_generator import DeltaGenerator

from views.state import url_state
from views.state.session import Analysis, Request
from views.text import say, t
from views.widgets import jobs


@dataclass
class Context:
    """What a page is handed: the sidebar's request, which carries its loaded model (None until a model loads), and
    the analysis of the request, run once when a page first asks for it."""

    request: Request | None
    notices: DeltaGenerator  # the sidebar's top: what the link asked for that the app could not show
    _analysis: list[Analysis | None] = field(default_factory=list)  # empty until asked: a page may never ask

    def analysis(self) -> Analysis | None:
        """The analysis of the sidebar's text, or None with a message on the page."""
        if not self._analysis:
            self._analysis.append(current_analysis(self.request))
        return self._analysis[0]


SESSION_KEY = "frame_context"
_current: contextvars.ContextVar[Context] = contextvars.ContextVar("sinkscope_context")


def enter(context: Context) -> None:
    """Called by the entry after drawing the sidebar: the context this run's page is handed. The session keeps it
    too, for a fragment's rerun (a head scrubbed), which runs the fragment alone, on a thread of its own."""
    _current.set(context)
    st.session_state[SESSION_KEY] = context


def current() -> Context:
    """The context the entry made on this run, or the one the page was handed before a fragment's rerun."""
    return _current.get(None) or st.session_state[SESSION_KEY]


def _token_limit_notice(request: Request, err: TokenLimitError, prefix: str) -> None:
    st.warning(t("common.too_long", error=say(err), limit=err.limit))
    if st.button(t("common.truncate", limit=err.limit), key=prefix + "truncate_button"):
        st.session_state[prefix + "truncate_text"] = request.text  # only this text: a new one is checked again
        st.rerun()


def analysis_of(request: Request, prefix: str = "") -> Analysis | None:
    """The analysis of ``request``, or None with a message on the page."""
    try:
        return Analysis(request, jobs.trace(request))
    except TokenLimitError as err:
        _token_limit_notice(request, err, prefix)
    except (SinkscopeError, RuntimeError, MemoryError) as err:  # a failed run must not end the session
        st.error(say(err) if isinstance(err, SinkscopeError) else t("common.model_failed", error=err))
    return None


def current_analysis(request: Request | None) -> Analysis | None:
    """The analysis of the sidebar's text; after a failed run, the message and the previous result of the same model
    (never another model's figures under this one's name); nothing without a request (no model loaded).

    A session keeps only its last request: the result lives in the shared cache, bounded by bytes (a trace at
    512 tokens is about 37 MB, mostly its residual norms), and is computed again if it was evicted.
    """
    if request is None:
        return None
    analysis = analysis_of(request)
    if analysis is not None:
        st.session_state["last_request"] = request
        return analysis
    previous = st.session_state.get("last_request")
    if previous is None or previous == request or (previous.model, previous.dtype) != (request.model, request.dtype):
        return None
    st.caption(t("common.previous_result"))
    return analysis_of(previous)


def say_notices() -> None:
    """After the page ran (it may have found more in the link, as the course's step), the link's notices."""
    with current().notices:
        url_state.show_ignored()


def load_failed(where: DeltaGenerator, spec: str, err: SinkscopeError) -> None:
    """At the top of the stage: the model could not load, why, and what to do about it."""
    remedy = "frame.remedy_hub" if HUB_ID.match(spec) and not looks_local(spec) else "frame.remedy_other"
    where.error(t("frame.load_failed", spec=spec, error=say(err), remedy=t(remedy, spec=spec)), icon=":material/error:")
