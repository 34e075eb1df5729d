"""The web server: Streamlit's, a page that knows its server's address, and a warm start.

Run with ``streamlit run serve.py``.

A direct link to a sub-page (``/claims``) makes Streamlit's page guess its server's address from the link:
it first asks ``/claims/_stcore/health`` and ``/claims/_stcore/host-config``, which answer 404 in the
browser console, and only then the root (streamlit/streamlit#7074). Serving those links a page that
states the address (``window.__streamlit.BACKEND_BASE_URL``, which the page reads before guessing)
removes the guess.

A link is one request line, and a shared text makes it long. uvicorn's HTTP parser (h11) holds at most 16 KB of
an unfinished request: a longer link that reaches the server in pieces was answered with a reset connection, so
the server holds as much as the longest link Chromium sends, and the app, not the socket, says what it refused.

On start, a background thread loads the default model and analyzes the example texts into the shared cache,
so the first visitors (a whole class opening one link) find their heatmaps ready. It is background work: a visitor
who asks meanwhile goes first, after at most one of its steps. The server's log says when it is done.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http import h11_impl

from views.site import URL_PATHS
from views.state.cache import warm_examples

MARKER = "<head>"
LONGEST_LINK = 2 * 1024 * 1024  # bytes: Chromium sends no longer URL
log = logging.getLogger("sinkscope.serve")
log.setLevel(logging.INFO)  # an operator sees when the warm start is done (Streamlit configures only its own loggers)
log.addHandler(logging.StreamHandler())

# Streamlit passes uvicorn no h11 limit, so each connection takes this fallback, read when it opens.
h11_impl.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE = LONGEST_LINK + 64 * 1024  # the link, and room for the headers


@cache
def _index_html() -> str:
    return (Path(st.__file__).parent / "static" / "index.html").read_text(encoding="utf-8")


def page_for(base: str) -> str:
    """Streamlit's index.html, told that its server lives at ``base`` (a path ending in /)."""
    address = f"<script>window.__streamlit = {{BACKEND_BASE_URL: location.origin + {json.dumps(base)}}}</script>"
    return _index_html().replace(MARKER, MARKER + address, 1)


class SubPageLinks:
    """ASGI middleware: a GET of ``<base>/<page>`` gets ``page_for(<base>/)``; everything else passes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            base, _, last = scope["path"].rpartition("/")
            if last in URL_PATHS:
                response = HTMLResponse(page_for(base + "/"), headers={"Cache-Control": "no-cache"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _warm() -> None:
    started = time.monotonic()
    try:
        warm_examples(lambda: log.info("The warm start loaded the model; visitors go first from now on"))
    except Exception:  # a failed warm-up costs only speed: the first visitor runs the model instead
        log.exception("Warming the example texts failed")
        return
    log.info("The warm start finished in %.0f s", time.monotonic() - started)


@asynccontextmanager
async def warm_start(_app: st.App) -> AsyncIterator[None]:
    threading.Thread(target=_warm, name="sinkscope-warm-up", daemon=True).start()
    yield


app = st.App("app.py", middleware=[Middleware(SubPageLinks)], lifespan=warm_start)
