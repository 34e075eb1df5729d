"""Load test on loopback: 16 browser sessions on one app process, each with its own text, at once.

Every session must get its own tokens and metrics back (no mix-ups between threads), the process
must survive, and the figures (sessions, runs, failures, peak memory, waits) are written to
test-results/load.txt.
"""

from __future__ import annotations

import asyncio
import csv
import io
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import numpy as np
from playwright.async_api import Page, async_playwright
from sinkscope.core.capture import analyze
from sinkscope.core.models import LoadedModel

from tests.browser.conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

SESSIONS = 16
LOAD_MS = 240_000
SUBJECTS = ["lighthouse", "river", "violin", "glacier", "market", "comet", "orchard", "harbor",
            "canyon", "lantern", "meadow", "falcon", "bakery", "compass", "volcano", "library"]  # fmt: skip


def session_text(index: int) -> str:
    subject = SUBJECTS[index]
    return f"Session {index} writes about the {subject}. " + " ".join([subject] * (index + 1))


def peak_memory_gb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 2**20


async def one_session(page: Page, url: str, index: int) -> tuple[float, str, str]:
    """Open a shared link with this session's text; return (wait in s, the 'T =' label, heads CSV)."""
    start = time.monotonic()
    await page.goto(f"{url}/?text={quote(session_text(index))}", timeout=LOAD_MS)
    label = page.get_by_text("Sink rate (eps = 0.30, T =")
    await label.wait_for(timeout=LOAD_MS)
    await page.get_by_text("Running the model").wait_for(state="detached", timeout=LOAD_MS)
    waited = time.monotonic() - start
    async with page.expect_download(timeout=LOAD_MS) as download:
        await page.get_by_role("button", name="Per-head CSV").click(timeout=LOAD_MS)
    path = await (await download.value).path()
    return waited, await label.inner_text(), Path(path).read_text(encoding="utf-8")


async def run_sessions(url: str) -> list[tuple[float, str, str] | BaseException]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        contexts = [await browser.new_context(accept_downloads=True) for _ in range(SESSIONS)]
        pages = [await context.new_page() for context in contexts]
        results = await asyncio.gather(
            *(one_session(page, url, i) for i, page in enumerate(pages)), return_exceptions=True
        )
        await browser.close()
    return results


def sink_column(heads_csv: str) -> np.ndarray:
    return np.array([float(row["sink"]) for row in csv.DictReader(io.StringIO(heads_csv))])


def test_sixteen_concurrent_sessions_each_get_their_own_results(
    app_server: tuple[str, subprocess.Popen], smollm2: LoadedModel
) -> None:
    url, process = app_server
    with ThreadPoolExecutor(1) as thread:  # its own event loop: pytest-playwright's sync API holds this one
        results = thread.submit(asyncio.run, run_sessions(url)).result()
    assert process.poll() is None, "the app process died"
    failures = [r for r in results if isinstance(r, BaseException)]
    waits = [r[0] for r in results if not isinstance(r, BaseException)]
    report = (
        f"sessions {SESSIONS}, runs {len(waits)}, failures {len(failures)}, "
        f"peak memory {peak_memory_gb(process.pid):.2f} GB, "
        f"wait median {statistics.median(waits) if waits else float('nan'):.1f} s, worst {max(waits, default=0):.1f} s"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "load.txt").write_text(report + "\n")
    print(report)
    assert not failures, failures
    for index, (_, label, heads_csv) in enumerate(results):
        expected = analyze(smollm2, session_text(index))
        assert f"T = {expected.n_tokens})" in label, (index, label)
        np.testing.assert_allclose(sink_column(heads_csv), expected.heads["sink"].ravel(), atol=1e-6)
