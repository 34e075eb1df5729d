"""Which tests share a pytest-xdist worker under ``pytest -n``: decided from the test's file, in the controller.

xdist's own ``xdist_group`` marks do not reach pytest 9's node ids (the group suffix it writes into ``_nodeid``
is no longer read), so ``make test`` names its groups here.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

BROWSER = "tests/browser/"


@functools.cache
def runs_pages(test_file: Path) -> bool:
    """Whether a test file runs pages in-process with Streamlit's AppTest."""
    return "AppTest" in test_file.read_text(encoding="utf-8")


# Test files that share a server (browser) or a process's app cache (pages) with the first group; the rest of
# each kind form a second group, so two servers and two page processes run side by side.
FIRST_GROUP = frozenset({
    "tests/browser/test_teacher_browser.py", "tests/browser/test_languages_browser.py",
    "tests/browser/test_census_browser.py", "tests/test_app.py", "tests/test_i18n.py", "tests/test_hybrid_app.py",
    "tests/test_links_app.py", "tests/test_learned_sinks_app.py",
})  # fmt: skip
# the longest units start first (measured: about 220, 215, 240, 125 and 90 s on two cores); then collection order
LONGEST_FIRST = ("browser-1", "browser-2", "tests/test_census.py", "pages-1", "pages-2")


class SharedCaches(LoadScopeScheduling):
    """Each unit goes to one worker: a group of browser tests (one server, whose cache each page fills once, and one
    browser), a group of in-process page tests (one process holds the app's cache of models, analyses and
    scoreboards), and otherwise one file at a time (a module's fixtures, such as a local Ray, start once)."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        self.root = config.rootpath
        config.option.loadscopereorder = False  # the order is LONGEST_FIRST's, then the collection's

    def _split_scope(self, nodeid: str) -> str:
        test_file = nodeid.split("::", 1)[0]
        group = 1 if test_file in FIRST_GROUP else 2
        if test_file.startswith(BROWSER):
            return f"browser-{group}"
        return f"pages-{group}" if runs_pages(self.root / test_file) else test_file

    def _assign_work_unit(self, node: object) -> None:
        """Hand out the longest unit still waiting: a long one started last would end the run alone."""
        waiting = [scope for scope in LONGEST_FIRST if scope in self.workqueue]
        if waiting:
            self.workqueue.move_to_end(waiting[0], last=False)
        super()._assign_work_unit(node)
