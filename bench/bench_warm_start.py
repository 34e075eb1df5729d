"""Benchmark: a visitor who arrives while the server's warm start runs, in a real browser on a fresh server.

    python bench/bench_warm_start.py [--repeats 3] [--ask-after 30] [--before PATH]

For each repeat a new server starts (its warm start analyzes the example texts, then runs the scoreboard's
streaming and KV-cache checks, the longest of its jobs); --ask-after seconds after it answers (by default, while the
KV-cache check runs on two cores), a visitor opens the explorer on a text of their own, and the seconds until their
head map is drawn are timed. ``--before`` serves another checkout the same way (the tree before a
change) so both rows come from one run. Prints the medians, their ratio, and this tree's warm start (from its log).
Wall-clock seconds: run it on an unloaded machine.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import sync_playwright  # noqa: E402

from bench.bench_interactive import WAIT, head_map_drawn, paragraph  # noqa: E402
from tests.browser.helpers import CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, wait_healthy  # noqa: E402

WARM_DONE = re.compile(r"The warm start finished in (\d+) s")


def visit_during_warm_start(tree: Path, seed: int, ask_after: float) -> tuple[float, float | None]:
    """(seconds to the visitor's own head map, the warm start's seconds from the log, None where it does not say)."""
    port, log = free_port(), tempfile.NamedTemporaryFile(suffix=".log", delete=False)
    command = [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.port", str(port),
               "--server.address", "127.0.0.1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree / "backend")}  # that tree's library
    process = subprocess.Popen(command, cwd=tree, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, seconds=300)
        time.sleep(ask_after)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            start = time.perf_counter()
            page.goto(f"{url}/?text={quote(paragraph(60, seed))}")
            head_map_drawn(page)
            seconds = time.perf_counter() - start
            browser.close()
        says_when = "The warm start finished" in (tree / "serve.py").read_text(encoding="utf-8")
        deadline = time.monotonic() + (WAIT / 1000 if says_when else 0)
        while time.monotonic() < deadline and not WARM_DONE.search(Path(log.name).read_text(errors="replace")):
            time.sleep(1)
        found = WARM_DONE.search(Path(log.name).read_text(errors="replace"))
        return seconds, float(found.group(1)) if found else None
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.unlink(log.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ask-after", type=float, default=30.0, help="seconds after the server answers")
    parser.add_argument("--before", type=Path, help="another checkout, served the same way (the tree before a change)")
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({"before": args.before} if args.before else {})
    rows = {}
    for repeat in range(args.repeats):
        for name, tree in trees.items():
            rows.setdefault(name, []).append(visit_during_warm_start(tree, repeat, args.ask_after))
            print(f"{name}, repeat {repeat}: {rows[name][-1]}", file=sys.stderr, flush=True)
    print("| tree | visitor's own head map during the warm start (median s) | warm start (median s) |")
    print("|---|---|---|")
    for name, found in rows.items():
        warm = [w for _, w in found if w is not None]
        shown = f"{statistics.median(warm):.0f}" if warm else "not logged"
        print(f"| {name} | {statistics.median(s for s, _ in found):.1f} | {shown} |")
    if args.before:
        ratio = statistics.median(s for s, _ in rows["before"]) / statistics.median(s for s, _ in rows["this tree"])
        print(f"\nthe visitor's map comes {ratio:.1f}x sooner in this tree")


if __name__ == "__main__":
    main()
