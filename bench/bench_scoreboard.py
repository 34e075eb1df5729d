"""Benchmark: the claims scoreboard and the handout for a text the server has not seen, on a fresh hosted server.

    python bench/bench_scoreboard.py [--repeats 3] [--students 30] [--tree PATH ...]

Each server starts, finishes its warm start (its CPU goes idle), then gets visitors speaking Streamlit's websocket
protocol: one at a time with a new 150-word text on the claims page (until its first verdict is drawn, then until
its count, drawn once every verdict is in), then on the handout
page (until its download button is drawn), then ``--students`` at once, each with a text of its own, arriving over
10 s on the claims page (until every verdict is in).
``--tree`` serves other checkouts too (the tree before a change), one after another, for a before/after table.
Wall-clock seconds: run it on an unloaded machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_interactive import (  # noqa: E402
    class_of_own_texts,
    paragraph,
    protocol_visit,
    server,
    summary,
)
from tests.browser.helpers import ROOT  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def warmed_up(pid: int, quiet: float = 0.1, every: float = 2.0) -> float:
    """Wait until the server's warm start is over (under ``quiet`` CPU seconds used in ``every`` seconds)."""
    start = time.perf_counter()
    before = cpu_seconds(pid)
    while True:
        time.sleep(every)
        now = cpu_seconds(pid)
        if now - before < quiet:
            return time.perf_counter() - start
        before = now


def board(element: object) -> bool:
    return element.HasField("table")


def every_verdict(element: object) -> bool:
    return element.HasField("markdown") and element.markdown.body.startswith("**Of ")  # the count, drawn last


def download(element: object) -> bool:
    return element.HasField("download_button")


VISITS = {  # the scoreboard's first verdict, its last, the handout
    "claims, first verdict": ("claims", "", board),
    "claims, every verdict": ("claims", "", every_verdict),
    "handout": ("handout", "", download),
}


def measure(root: Path, repeats: int, students: int) -> dict[str, object]:
    found: dict[str, object] = {}
    with server({"PYTHONPATH": str(root / "backend")}, root) as (url, process):  # that tree's own library
        found["warm start (s)"] = warmed_up(process.pid)
        for kind, (name, visit) in enumerate(VISITS.items()):  # a text of its own for every visit: none cached
            warmed_up(process.pid)  # idle again: a visitor who left at the first verdict leaves its run in progress
            waits = [asyncio.run(protocol_visit(url, paragraph(150, 7000 + 100 * kind + i), visit))[0]
                     for i in range(repeats)]  # fmt: skip
            found[f"{name}, new text (median s)"] = statistics.median(waits)
            print(f"{root.name} {name}: {', '.join(f'{w:.1f}' for w in waits)} s", file=sys.stderr, flush=True)
        if students:
            waits, line = summary(
                asyncio.run(class_of_own_texts(url, students, visit=VISITS["claims, every verdict"], seed=8000))
            )
            found[f"{students} students, claims page, own texts within 10 s"] = line
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--tree", action="append", type=Path, default=[], help="another checkout to serve too")
    args = parser.parse_args()
    results = {str(root): measure(root, args.repeats, args.students) for root in [*args.tree, ROOT]}
    print("\n| tree | measure | value |\n|---|---|---|")
    for root, found in results.items():
        for name, value in found.items():
            print(f"| {Path(root).name} | {name} | {value if isinstance(value, str) else f'{value:.2f}'} |")


if __name__ == "__main__":
    main()
