"""Benchmark: hostile census uploads against a hosted server, in a real browser (Playwright + Debian's chromium).

    python bench/bench_upload.py [--rows 5000000,15000000] [--visitors 3]

For each file, a few kilobytes of Parquet that hold millions of constant rows, one visitor uploads it on the
census page; the table prints the file's size, the seconds from the upload to the refusal on screen, and the
server's resident memory before, at its peak (sampled every 20 ms) and after. ``--visitors`` more visitors then
upload the largest file at once. Run it on an unloaded machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from bench.bench_interactive import server  # noqa: E402
from tests.browser.helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.helpers import many_rows  # noqa: E402

GB = 1024**3
SOURCE = "Census"  # the source picker, which opens on the shipped census
UPLOAD, REFUSAL = "Upload a Parquet file", "rows; this server reads census tables"


@contextmanager
def peak_memory(process: psutil.Process) -> Iterator[list[float]]:
    """[peak GB]: the resident memory of ``process`` and its children, sampled until the block ends."""
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            tree = [process, *process.children(recursive=True)]
            peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree if p.is_running()) / GB)
            time.sleep(0.02)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()


def census_upload_page(browser: Browser, url: str) -> Page:
    """A visitor on the census page with the upload chosen."""
    page = browser.new_page()
    page.goto(f"{url}/census")
    page.get_by_label(SOURCE, exact=True).click(timeout=300_000)
    page.get_by_role("option", name=UPLOAD).click()
    page.get_by_test_id("stMainBlockContainer").locator("input[type=file]").wait_for(state="attached")
    return page


def refused(pages: list[Page], path: Path) -> float:
    """Every page uploads ``path`` at once; seconds until the last one shows the refusal."""
    started = time.perf_counter()
    for page in pages:
        page.get_by_test_id("stMainBlockContainer").locator("input[type=file]").set_input_files(str(path))
    for page in pages:
        expect(page.get_by_text(REFUSAL).first).to_be_visible(timeout=300_000)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="5000000,15000000")
    parser.add_argument("--visitors", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    files = {}
    for rows in map(int, args.rows.split(",")):
        files[rows] = folder / f"heads-{rows}.parquet"
        files[rows].write_bytes(many_rows(rows))
    print("| upload | file (KB) | to the refusal (s) | server before (GB) | peak (GB) | after (GB) |")
    print("|---|---:|---:|---:|---:|---:|")
    with server({"SINKSCOPE_HOSTED": "1"}) as (url, process), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tree = psutil.Process(process.pid)
        refused([census_upload_page(browser, url)], files[min(files)])  # a first visit loads the page's code
        for rows, path in files.items():
            page = census_upload_page(browser, url)
            before = tree.memory_info().rss / GB
            with peak_memory(tree) as peak:
                seconds = refused([page], path)
            after = tree.memory_info().rss / GB
            size = path.stat().st_size / 1024
            print(f"| {rows:,} rows | {size:.1f} | {seconds:.2f} | {before:.2f} | {peak[0]:.2f} | {after:.2f} |")
        largest = files[max(files)]
        pages = [census_upload_page(browser, url) for _ in range(args.visitors)]
        before = tree.memory_info().rss / GB
        with peak_memory(tree) as peak:
            seconds = refused(pages, largest)
        after = tree.memory_info().rss / GB
        print(
            f"| {args.visitors} visitors at once, {max(files):,} rows each | {largest.stat().st_size / 1024:.1f} "
            f"| {seconds:.2f} | {before:.2f} | {peak[0]:.2f} | {after:.2f} |"
        )
        browser.close()


if __name__ == "__main__":
    main()
