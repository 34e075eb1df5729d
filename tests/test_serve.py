"""The web server's pages: a link to a sub-page gets a page that knows where its server is."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

import serve


def test_a_page_states_its_server() -> None:
    head = serve.page_for("/course/").split("<head>", 1)[1]
    assert head.startswith('<script>window.__streamlit = {BACKEND_BASE_URL: location.origin + "/course/"}')


def served(path: str) -> tuple[str, bytes]:
    """What SubPageLinks answers a GET of ``path`` with: ("page", its body) or ("passed", b"")."""
    sent: list[dict] = []

    async def downstream(scope: dict, receive: object, send: object) -> None:
        sent.append({"type": "passed"})

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
    with ThreadPoolExecutor(1) as thread:  # its own event loop: pytest-playwright's sync API may hold this one
        thread.submit(asyncio.run, serve.SubPageLinks(downstream)(scope, receive, send)).result()
    if sent[0]["type"] == "passed":
        return "passed", b""
    return "page", b"".join(message.get("body", b"") for message in sent)


@pytest.mark.parametrize("path", ["/claims", "/streaming", "/explorer", "/course/claims"])
def test_every_page_link_gets_the_page(path: str) -> None:
    kind, body = served(path)
    base = path.rpartition("/")[0] + "/"
    assert kind == "page" and f'BACKEND_BASE_URL: location.origin + "{base}"'.encode() in body


@pytest.mark.parametrize("path", ["/", "/static/js/index.js", "/_stcore/health", "/claims/", "/media/x.png"])
def test_everything_else_passes_to_streamlit(path: str) -> None:
    assert served(path)[0] == "passed"
