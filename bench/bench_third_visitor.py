"""Benchmark (issue 54, item 3): one visitor never holds the rest, and Stop stops.

    python bench/bench_third_visitor.py [--repeats 3] [--tree PATH]

On a real server of this checkout (and of ``--tree``, a checkout to compare with, e.g. the tree before the per-head
map ran in units of a few heads), a third visitor opens the explorer with a 150-word text of their own (nothing
cached), as a websocket session speaking Streamlit's protocol (``bench_interactive.protocol_visit``): on an idle
server, while two other visitors run the KV lab's per-head map (512 tokens) and its eviction run, and after both
pressed Stop. Also the seconds from each Stop click to its run's end (the button gone). Medians over ``--repeats``
visits; wall seconds on this machine: run it on an unloaded machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from bench.bench_interactive import WAIT, paragraph, protocol_visit, server  # noqa: E402
from tests.browser.helpers import CHROMIUM, CHROMIUM_ARGS, ROOT, settled  # noqa: E402

RUNS = {"map": "Measure every head", "eviction": "Run the four policies"}  # the two long runs' buttons on /kv


def visits(url: str, repeats: int, seed: int) -> list[float]:
    """Seconds to the explorer's head map for ``repeats`` new visitors, one after another, each with its own text."""
    with ThreadPoolExecutor(1) as apart:  # Playwright's own event loop runs in this thread
        return [apart.submit(asyncio.run, protocol_visit(url, paragraph(150, seed + i))).result()[0]
                for i in range(repeats)]  # fmt: skip


def stop_button(page: Page) -> object:
    return page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop")


def start(page: Page, url: str, button: str) -> None:
    """Open the KV lab and press ``button``; return once its run shows its Stop."""
    page.goto(f"{url}/kv")
    settled(page)
    page.get_by_role("button", name=button).click()
    expect(stop_button(page)).to_be_visible(timeout=WAIT)


def stopped_in(page: Page) -> float:
    """Seconds from a click on the page's Stop to its run's end (the button gone)."""
    began = time.perf_counter()
    stop_button(page).click()
    expect(stop_button(page)).to_have_count(0, timeout=WAIT)
    return time.perf_counter() - began


def measure(root: Path, repeats: int) -> dict[str, float]:
    with server({"PYTHONPATH": str(root / "backend")}, root) as (url, _), sync_playwright() as playwright:
        visits(url, 1, 1)  # the model loaded and warm (the tree's own library: PYTHONPATH)
        idle = visits(url, repeats, 100)
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pages = {name: browser.new_context().new_page() for name in RUNS}
        for name, button in RUNS.items():
            start(pages[name], url, button)
        busy = visits(url, repeats, 200)
        still = all(stop_button(page).count() for page in pages.values())  # both runs outlasted the visits
        stops = {name: stopped_in(page) for name, page in pages.items()}
        after = visits(url, repeats, 300)
        browser.close()
    return {"idle": statistics.median(idle), "busy": statistics.median(busy), "after": statistics.median(after),
            "stop map": stops["map"], "stop eviction": stops["eviction"], "ran throughout": still}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="another checkout to measure the same way (before)")
    args = parser.parse_args()
    trees = [("before", args.tree)] if args.tree else []
    print("| tree | idle s | during two runs s | ratio | after Stop s | Stop, per-head map s | Stop, eviction s | "
          "both ran throughout |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for name, root in [*trees, ("this", ROOT)]:
        found = measure(root, args.repeats)
        print(f"| {name} | {found['idle']:.1f} | {found['busy']:.1f} | {found['busy'] / found['idle']:.1f}x | "
              f"{found['after']:.1f} | {found['stop map']:.1f} | {found['stop eviction']:.1f} | "
              f"{'yes' if found['ran throughout'] else 'no'} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
