"""The web server: Streamlit's, a page that knows its server's address, and a warm start.

Run with ``streamlit run serve.py``.

A direct link to a sub-page (``/claims``) makes Streamlit's page guess its server's address from the link:
it first asks ``/claims/_stcore/health`` and ``/claims/_stcore/host-config``, which answer 404 in the
browser console, and only then the root (streamlit/streamlit#7074). Serving those links a page that
states the address (``window.__streamlit.BACKEND_BASE_URL``, which the page reads before guessing)
removes the guess.

Every page also starts fetching and evaluating, as soon as it opens, the front-end chunks of the elements the first
page draws (Plotly's alone is 4.7 MB of script): Streamlit would import each only when its element arrives over
the websocket, one wave of module requests after another, once the page has connected.

On start, a background thread loads the default model and analyzes the example texts into the shared cache,
so the first visitors (a whole class opening one link) find their heatmaps ready.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from views.common import warm_examples
from views.site import URL_PATHS

MARKER = "<head>"
FIRST_PAGE_CHUNKS = ("PlotlyChart", "DataFrame", "Slider", "Metric", "Radio", "Selectbox", "TextArea",
                     "FileUploader", "Checkbox", "PageLink", "DownloadButton")  # fmt: skip
STATIC = Path(st.__file__).parent / "static"
log = logging.getLogger("sinkscope.serve")


@cache
def _index_html() -> str:
    return (STATIC / "index.html").read_text(encoding="utf-8")


@cache
def first_page_chunks() -> tuple[str, ...]:
    """File names of FIRST_PAGE_CHUNKS in this Streamlit's build (hashed names; one that is missing is skipped)."""
    folder = STATIC / "static" / "js"
    return tuple(found.name for chunk in FIRST_PAGE_CHUNKS for found in sorted(folder.glob(f"{chunk}.*.js"))[:1])


def page_for(base: str) -> str:
    """Streamlit's index.html, told that its server lives at ``base`` (a path ending in /), importing the first
    page's chunks at once."""
    origin = f"location.origin + {json.dumps(base)}"
    address = f"<script>window.__streamlit = {{BACKEND_BASE_URL: {origin}}}</script>"
    chunks = json.dumps(first_page_chunks())
    early = f'<script type="module">for (const chunk of {chunks}) import({origin} + "static/js/" + chunk)</script>'
    return _index_html().replace(MARKER, MARKER + address + early, 1)


@cache
def root_path() -> str:
    prefix = st.get_option("server.baseUrlPath").strip("/")
    return f"/{prefix}/" if prefix else "/"


class PageLinks:
    """ASGI middleware: a GET of the root or of ``<base>/<page>`` gets ``page_for(<base>/)``; everything else
    passes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            base, _, last = scope["path"].rpartition("/")
            if last in URL_PATHS or scope["path"] == root_path():
                response = HTMLResponse(page_for(base + "/"), headers={"Cache-Control": "no-cache"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _warm() -> None:
    try:
        warm_examples()
    except Exception:  # a failed warm-up costs only speed: the first visitor runs the model instead
        log.exception("Warming the example texts failed")


@asynccontextmanager
async def warm_start(_app: st.App) -> AsyncIterator[None]:
    threading.Thread(target=_warm, name="sinkscope-warm-up", daemon=True).start()
    yield


app = st.App("app.py", middleware=[Middleware(PageLinks)], lifespan=warm_start)
