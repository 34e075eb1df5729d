"""Browser tests: a real ``streamlit run`` on loopback, driven by Playwright in Debian's chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.helpers import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, wait_healthy


@pytest.fixture(scope="session")
def app_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The served app's log (outside test-results/, which pytest-playwright empties when its session starts)."""
    return tmp_path_factory.mktemp("server") / "streamlit.log"


@pytest.fixture(scope="session")
def app_server(app_log: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A ``streamlit run serve.py`` on a free loopback port: (its URL, its process)."""
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1"]
    log = app_log.open("w")
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


@pytest.fixture(scope="session")
def app_url(app_server: tuple[str, subprocess.Popen]) -> str:
    return app_server[0]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: `make test` installs it (apt-get install chromium)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": 1400, "height": 1000}, "accept_downloads": True}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Keep a screenshot of the page when a browser test fails."""
    outcome = yield
    report = outcome.get_result()
    page = item.funcargs.get("page") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and page is not None:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{item.name}.png"), full_page=True)
