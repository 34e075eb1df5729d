"""The web server's pages: every link gets a page that knows its server and imports the first page's chunks."""

from __future__ import annotations

import asyncio

import pytest

import serve


def test_every_first_page_chunk_is_found_in_this_streamlit_build() -> None:
    """A Streamlit upgrade that renames a chunk fails here instead of silently loading it late again."""
    names = serve.first_page_chunks()
    assert [name.split(".")[0] for name in names] == list(serve.FIRST_PAGE_CHUNKS)
    assert all((serve.STATIC / "static" / "js" / name).is_file() for name in names)


def test_a_page_states_its_server_and_imports_the_chunks_from_there() -> None:
    page = serve.page_for("/course/")
    head = page.split("<head>", 1)[1]
    assert head.startswith('<script>window.__streamlit = {BACKEND_BASE_URL: location.origin + "/course/"}')
    assert 'import(location.origin + "/course/" + "static/js/" + chunk)' in head
    assert all(f'"{name}"' in head for name in serve.first_page_chunks())


def served(path: str) -> tuple[str, bytes]:
    """What PageLinks answers a GET of ``path`` with: ("page", its body) or ("passed", b"")."""
    sent: list[dict] = []

    async def downstream(scope: dict, receive: object, send: object) -> None:
        sent.append({"type": "passed"})

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
    asyncio.run(serve.PageLinks(downstream)(scope, receive, send))
    if sent[0]["type"] == "passed":
        return "passed", b""
    return "page", b"".join(message.get("body", b"") for message in sent)


@pytest.mark.parametrize("path", ["/", "/claims", "/streaming", "/explorer"])
def test_the_root_and_every_page_link_get_the_page(path: str) -> None:
    kind, body = served(path)
    assert kind == "page" and b'BACKEND_BASE_URL: location.origin + "/"' in body


@pytest.mark.parametrize("path", ["/static/js/index.js", "/_stcore/health", "/claims/", "/media/x.png"])
def test_everything_else_passes_to_streamlit(path: str) -> None:
    assert served(path)[0] == "passed"
