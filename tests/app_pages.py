"""Open a page of the app in AppTest by its URL path.

The pages are callables given to ``st.Page``; AppTest's ``switch_page`` finds file pages only. A callable page's
id is the hash of its URL path (``st.Page._script_hash``), so the next run opens it, with no first run needed.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from views.site import URL_PATHS


def go_to(at: AppTest, url_path: str) -> AppTest:
    """Make ``at``'s next run open the page at ``url_path`` ("softmax", "lab", ...)."""
    assert url_path in URL_PATHS, f"no page at /{url_path}"
    at._page_hash = calc_hash(url_path)  # what AppTest.switch_page sets for a file page
    return at
