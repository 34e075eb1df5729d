"""How ``make test`` shares its tests between pytest-xdist workers (tests/workers.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.workers import SharedCaches

ROOT = Path(__file__).resolve().parents[1]


def unit_of(nodeid: str) -> str:
    return SharedCaches._split_scope(SimpleNamespace(root=ROOT), nodeid)


def test_browser_tests_page_tests_and_other_files_each_stay_on_one_worker() -> None:
    assert unit_of("tests/browser/test_course_browser.py::test_x[chromium]") == "browser"
    assert unit_of("tests/browser/test_load.py::test_y") == "browser"  # one server for every browser test
    assert unit_of("tests/test_app.py::test_a") == unit_of("tests/test_i18n.py::test_b[fr]") == "pages"
    assert unit_of("tests/test_census.py::test_c") == unit_of("tests/test_census.py::test_d[1]")
    assert unit_of("tests/test_census.py::test_c") != unit_of("tests/test_metrics.py::test_e")
