"""Which tests share a pytest-xdist worker under ``pytest -n``: decided from the test's file and the markers its
module declares (pytest.ini), in the controller.

xdist's own ``xdist_group`` marks do not reach pytest 9's node ids (the group suffix it writes into ``_nodeid``
is no longer read), so ``make test`` names its groups here.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

BROWSER = "tests/browser/"


@functools.cache
def marked_pages(test_file: Path) -> bool:
    """Whether a test module declares the ``pages`` marker (``pytestmark``): it opens the app's pages in-process.
    The controller sees node ids only, so it reads the module's own declaration."""
    tree = ast.parse(test_file.read_text(encoding="utf-8"))
    declared = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == "pytestmark" for target in node.targets)]  # fmt: skip
    return any(getattr(mark, "attr", None) == "pages" for value in declared for mark in ast.walk(value))


class SharedCaches(LoadScopeScheduling):
    """Each unit goes to one worker: every browser test (one server, whose cache each page fills once, and one
    browser), every in-process page test (one process holds the app's cache of models, analyses and scoreboards),
    and otherwise one file at a time (a module's fixtures, such as a local Ray, start once)."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        self.root = config.rootpath
        # units in collection order: the browser and page tests (collected first) start at once, the census's
        # few long tests early; xdist's default, most tests first, took 406 s against 397 s here
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        test_file = nodeid.split("::", 1)[0]
        if test_file.startswith(BROWSER):
            return "browser"
        return "pages" if marked_pages(self.root / test_file) else test_file
