"""Benchmark: the app as a class uses it, in a real browser (Playwright + Debian's chromium) on a real server.

    python bench/bench_interactive.py [--repeats 5] [--sessions 30] [--skip fresh,load] [--crowd-of browsers]
                                      [--tree PATH]

Prints each interaction's median over --repeats beside its target (the speed issue's table), then the load
figures: many sessions opening one shared link at once, and a short analysis beside a long streaming sweep.
Wall-clock seconds: run it on an unloaded machine.

The crowd is, by default, that many sessions speaking Streamlit's own websocket protocol, as the server sees a
class of browsers on laptops of their own; each session's drawing is the warm first-heatmap row, measured in
a real browser. ``--crowd-of browsers`` opens that many Chromium pages instead, on this machine's own cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import websockets  # noqa: E402
from playwright.async_api import async_playwright  # noqa: E402
from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402
from sinkscope.core.i18n import Text  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

from tests.browser.helpers import CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, settled, wait_healthy  # noqa: E402

WAIT = 180_000  # ms: nothing here should take this long; a timeout is a failure (named by its wait), not a number
SINK_TITLE = Text("en").metric("sink") + ":"  # how the sink metric's figures begin their title ("sink score: ...")
HEAD_MAP = ".ss-head-map figcaption"
FIGURE_TITLE = ".stPlotlyChart .gtitle"
WORDS = ("keeper light harbor ship night storm lamp tower wave rock sailor map tide coast wind salt dawn rope "
         "bell fog").split()  # fmt: skip


def paragraph(words: int, seed: int) -> str:
    """A different text of ``words`` words for every seed, so no repeat finds it cached (words drawn by a generator
    seeded with ``seed``: a formula in the seed repeated its texts every 20 seeds)."""
    draw = random.Random(seed)
    return " ".join(draw.choice(WORDS) for _ in range(words)) + "."


@contextmanager
def server(env: dict[str, str] | None = None, root: Path = ROOT) -> Iterator[tuple[str, subprocess.Popen]]:
    """``streamlit run serve.py`` of the checkout at ``root`` on a free loopback port; yields (url, process) once
    it answers."""
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1"]
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        command, cwd=root, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, seconds=300)
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=30)


def note(found: dict[str, list[float]], name: str, seconds: float) -> None:
    """Record one measurement, and say it at once: a long run shows where it is."""
    found.setdefault(name, []).append(seconds)
    print(f"{name}: {seconds:.2f} s", file=sys.stderr, flush=True)


def timed(action: Callable[[], None], done: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    done()
    return time.perf_counter() - start


DRAWN = f"""[...document.querySelectorAll('{FIGURE_TITLE}')]
    .some(title => title.textContent.includes(text) && title.getBoundingClientRect().width > 0)"""
FIGURE_TITLED = f"text => {DRAWN}"
MAP_DRAWN = """[...document.querySelectorAll('.ss-head-map')]
    .some(map => map.querySelector('figcaption').textContent.includes(text)
        && map.querySelector('.ss-cells > i').getBoundingClientRect().width > 0)"""


def figure_drawn(page: Page, title: str) -> None:
    """Wait for a drawn figure whose title holds ``title``, looked for at every animation frame: ``expect``
    polls at growing intervals (up to a second), which would add its own delay to what is measured."""
    page.wait_for_function(FIGURE_TITLED, arg=title, polling="raf", timeout=WAIT)


def head_map_drawn(page: Page) -> None:
    """Wait for the head map of the sink metric, its cells laid out."""
    page.wait_for_function(f"text => {MAP_DRAWN}", arg=SINK_TITLE, polling="raf", timeout=WAIT)


DRAWN_SINCE = f"""text => {{
    const navigation = performance.getEntriesByType('navigation')[0];
    if (!({MAP_DRAWN}) || !navigation || !navigation.loadEventEnd) return false;
    return [performance.now() / 1000, Math.max(0, performance.now() - navigation.loadEventEnd) / 1000];
}}"""


def first_heatmap(page: Page, url: str) -> tuple[float, float]:
    """(seconds from the start of navigation, seconds after the page's load event) to the drawn head map,
    read by the page's own clock."""
    page.goto(url)
    drawn = page.wait_for_function(DRAWN_SINCE, arg=SINK_TITLE, polling="raf", timeout=WAIT)
    since_start, after_load = drawn.json_value()
    return since_start, after_load


def scrub(page: Page, slider: str, title: str) -> float:
    """Move a One head slider one step; seconds until the map's title names the new position."""
    page.get_by_role("slider", name=slider).focus()
    return timed(lambda: page.keyboard.press("ArrowRight"), lambda: figure_drawn(page, title))


def open_one_head(page: Page, url: str, layer: int, head: int) -> None:
    page.goto(f"{url}/?example=english&tab_id=one&layer={layer}&head={head}")
    expect(page.get_by_text(f"Layer {layer}, head {head}").first).to_be_visible(timeout=WAIT)
    settled(page)


def type_text(page: Page, text: str) -> None:
    box = page.get_by_test_id("stSidebar").get_by_label("Text")
    box.fill(text)
    box.press("Control+Enter")


def analysis_of(page: Page, text: str) -> float:
    """Seconds from submitting ``text`` until the app has run it (Streamlit's script-state flag) and drawn its head
    map. Not a label's change: two random texts of different word counts can have the same number of tokens."""
    page.evaluate(WATCH_RUNS)

    def done() -> None:
        page.wait_for_function(QUIET_AGAIN, timeout=WAIT)
        head_map_drawn(page)

    return timed(lambda: type_text(page, text), done)


WATCH_RUNS = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    window.__ran = false;
    window.__watch?.disconnect();
    window.__watch = new MutationObserver(() => {
        if (app.dataset.testScriptState !== 'notRunning') window.__ran = true;
    });
    window.__watch.observe(app, {attributes: true});
}"""
QUIET_AGAIN = (
    "() => window.__ran && document.querySelector('[data-testid=\"stApp\"]').dataset.testScriptState === 'notRunning'"
)


def run_and_time(page: Page, action: Callable[[], None]) -> float:
    """Seconds from ``action`` until the app has run and gone quiet again (Streamlit's own script-state flag)."""
    page.evaluate(WATCH_RUNS)
    start = time.perf_counter()
    action()
    page.wait_for_function(QUIET_AGAIN, timeout=WAIT)
    return time.perf_counter() - start


def click_and_settle(page: Page, button: str) -> float:
    return run_and_time(page, lambda: page.get_by_role("button", name=button, exact=True).click())


def streaming_run(page: Page, url: str) -> tuple[float, float]:
    """(seconds to the first curve point, seconds to the whole default run) on the streaming page."""
    page.goto(f"{url}/streaming")
    settled(page)
    page.evaluate(WATCH_RUNS)
    start = time.perf_counter()
    page.get_by_role("button", name="Stream", exact=True).click()
    figure_drawn(page, "loss while streaming")
    first = time.perf_counter() - start
    page.wait_for_function(QUIET_AGAIN, timeout=WAIT)
    return first, time.perf_counter() - start


LESSONS = {  # page -> the buttons that run its interventions (defaults: the English example, T <= 256)
    "break": ["Drop them", "Replace it", "Perturb both"],
    "massive": ["Run the intervention"],
    "diagonals": ["Run the intervention"],
}


def interactive(url: str, repeats: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        first_heatmap(page, url)  # the server's first visit loads the model: not the warm figure
        for _ in range(repeats):
            fresh = browser.new_page(viewport={"width": 1440, "height": 1000})
            since_start, after_load = first_heatmap(fresh, f"{url}/?example=english")
            note(found, "first heatmap, warm server", after_load)
            note(found, "first heatmap, warm server, from navigation", since_start)
            fresh.close()
        open_one_head(page, url, 23, 0)
        for head in range(1, repeats + 1):
            note(found, "head scrub (cached)", scrub(page, "Head", f"Layer 23, head {head}"))
        page.goto(f"{url}/")
        head_map_drawn(page)
        for i in range(repeats):
            note(found, "your own 150-word text", analysis_of(page, paragraph(150 + i, i)))
        analysis_of(page, paragraph(510, 99))  # 512 tokens
        page.get_by_role("tab", name="One head").click()
        settled(page)
        title = page.locator(FIGURE_TITLE).filter(has_text=re.compile(r"^Layer \d+, head")).first.text_content() or ""
        layer = int(re.match(r"Layer (\d+)", title).group(1))
        for step in range(1, repeats + 1):
            note(found, "layer scrub, T = 512", scrub(page, "Layer", f"Layer {layer + step}, head"))
        for _ in range(repeats):
            first, whole = streaming_run(page, url)
            note(found, "streaming: first curve points", first)
            note(found, "streaming: whole default run", whole)
            note(found, "generation demo", click_and_settle(page, "Generate 80 tokens both ways"))
        for lesson, buttons in LESSONS.items():
            page.goto(f"{url}/{lesson}?example=english")
            settled(page, WAIT)
            for button in buttons:  # once each: a second click of the same settings is answered from the cache
                note(found, "lesson interventions (each)", click_and_settle(page, button))
        browser.close()
    return found


async def one_visit(browser: object, url: str, text: str) -> tuple[float, bool]:
    """(seconds to the head map, whether the page showed this visit's own text) for one new session."""
    context = await browser.new_context()
    page = await context.new_page()
    start = time.perf_counter()
    await page.goto(url)
    await page.locator(HEAD_MAP).filter(has_text=SINK_TITLE).first.wait_for(timeout=WAIT)
    waited = time.perf_counter() - start
    shown = await page.get_by_test_id("stSidebar").get_by_label("Text").input_value()
    await context.close()
    return waited, shown == text


def explorer_map(element: object) -> bool:
    """The explorer's head map (HTML) of the sink metric."""
    return element.HasField("bidi_component") and f"<figcaption>{SINK_TITLE}" in element.bidi_component.json


def course_map(element: object) -> bool:
    """The course's first step, answered: its head map (a Plotly figure) of the sink metric."""
    return element.HasField("plotly_chart") and f"{SINK_TITLE} " in element.plotly_chart.spec


COURSE = ("course", "&step=1&answers=first", course_map)  # page, the link's course fields, the figure awaited


async def protocol_visit(url: str, text: str, visit: tuple = ("", "", explorer_map)) -> tuple[float, bool]:
    """(seconds to the head map's figure, whether the text box held this link's text) for one new session that
    speaks the browser's websocket protocol: it connects, runs the linked page and reads what comes back.
    ``visit``: the page, the link's other fields and the figure that ends the wait (the explorer's by default)."""
    page, fields, drawn = visit
    start = time.perf_counter()
    stream = url.replace("http://", "ws://") + "/_stcore/stream"
    async with websockets.connect(stream, subprotocols=["streamlit"], origin=url, max_size=None) as socket:
        ask = BackMsg()
        ask.rerun_script.query_string = f"text={quote(text)}{fields}"
        ask.rerun_script.page_name = page
        await socket.send(ask.SerializeToString())
        shown = None
        while True:
            message = ForwardMsg.FromString(await socket.recv())
            element = message.delta.new_element
            if element.HasField("text_area"):
                shown = element.text_area.value if element.text_area.set_value else element.text_area.default
            if drawn(element):
                return time.perf_counter() - start, shown == text


async def crowd(url: str, sessions: int, of: str) -> list[tuple[float, bool] | BaseException]:
    """``sessions`` visitors opening one shared link at the same moment (websocket sessions or browsers)."""
    text = paragraph(60, 1234)
    if of == "sessions":
        visits = [protocol_visit(url, text) for _ in range(sessions)]
        return await asyncio.gather(*visits, return_exceptions=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        link = f"{url}/?text={quote(text)}"
        results = await asyncio.gather(
            *(one_visit(browser, link, text) for _ in range(sessions)), return_exceptions=True
        )
        await browser.close()
    return results


async def class_of_own_texts(
    url: str, students: int, over: float = 10.0, visit: tuple = ("", "", explorer_map), seed: int = 5000
) -> list[tuple[float, bool] | BaseException]:
    """``students`` sessions, each with a 150-word text of its own (nothing cached), arriving evenly over ``over``
    seconds, as a class does after "paste your paragraph": each one's wait from its own arrival."""

    async def arrive(i: int) -> tuple[float, bool]:
        await asyncio.sleep(over * i / students)
        return await protocol_visit(url, paragraph(150, seed + i), visit)

    return await asyncio.gather(*(arrive(i) for i in range(students)), return_exceptions=True)


def summary(results: list[tuple[float, bool] | BaseException]) -> tuple[list[float], str]:
    """The waits, and a line: median and worst wait, failures, sessions that saw another's text."""
    waits = [r[0] for r in results if not isinstance(r, BaseException)]
    crossed = sum(1 for r in results if not isinstance(r, BaseException) and not r[1])
    failures = sum(isinstance(r, BaseException) for r in results)
    line = (f"median wait {statistics.median(waits):.1f} s, worst {max(waits):.1f} s, failures {failures}, "
            f"saw another text {crossed}") if waits else f"every session failed ({failures})"  # fmt: skip
    return waits, line


def peak_memory_gb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 2**20


def beside_a_sweep(url: str, seed: int) -> tuple[float, float]:
    """Seconds for a short analysis (a text of its own) of a second visitor while a first runs the streaming
    page's sink sweep: (in a browser on this machine, as a websocket session: what the server makes it wait)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        sweeper = browser.new_page()
        sweeper.goto(f"{url}/streaming")
        settled(sweeper)
        sweeper.get_by_text("real streaming loop").click()
        sweeper.get_by_role("button", name="Sweep S = 0, 1, 2, 4, 8").click()
        expect(sweeper.get_by_text("side by side:").first).to_be_visible(timeout=WAIT)
        visitor = browser.new_page()
        in_browser = first_heatmap(visitor, f"{url}/?text={quote(paragraph(30, 4321 + seed))}")[0]
        with ThreadPoolExecutor(1) as apart:  # Playwright's own event loop runs in this thread
            served, _ = apart.submit(asyncio.run, protocol_visit(url, paragraph(30, 8642 + seed))).result()
        browser.close()
    return in_browser, served


def fresh_start(repeats: int) -> list[float]:
    """Seconds from starting a server with an empty model cache to a visitor's first head map."""
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            with server({"SINKSCOPE_CACHE": cache}) as (url, _), sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page()
                page.goto(url)
                head_map_drawn(page)
                times.append(time.perf_counter() - start)
                browser.close()
    return times


TARGETS = {
    "first heatmap, warm server": 1.5, "first heatmap, warm server, from navigation": 1.5,
    "first heatmap, fresh machine": 30, "head scrub (cached)": 0.3,
    "layer scrub, T = 512": 1, "your own 150-word text": 2, "streaming: first curve points": 2,
    "streaming: whole default run": 30, "generation demo": 20, "lesson interventions (each)": 3,
    "30 sessions, one link: worst wait": 10, "30 students, own 150-word texts within 10 s: worst wait": 10,
    "30 students on the course's first step, own texts within 10 s: worst wait": 10,
    "short analysis beside a sweep": 5,
    "short analysis beside a sweep, server side": 5,
}  # fmt: skip


def report(found: dict[str, list[float]]) -> None:
    print("\n| interaction | target (s) | median (s) | runs | within |\n|---|---|---|---|---|")
    for name, target in TARGETS.items():
        if name in found:
            median = statistics.median(found[name])
            within = "yes" if median <= target else "NO"
            print(f"| {name} | <= {target:g} | {median:.2f} | {len(found[name])} | {within} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--skip", default="", help="comma-separated: fresh, interactive, load")
    parser.add_argument("--crowd-of", choices=["sessions", "browsers"], default="sessions")
    parser.add_argument("--tree", type=Path, default=ROOT, help="serve another checkout (the tree before a change)")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    found: dict[str, list[float]] = {}
    if "fresh" not in skip:
        found["first heatmap, fresh machine"] = fresh_start(args.repeats)
    with server({"PYTHONPATH": str(args.tree / "backend")}, args.tree) as (url, process):  # that tree's library
        if "interactive" not in skip:
            found |= interactive(url, args.repeats)
        if "load" not in skip:
            waits, line = summary(asyncio.run(crowd(url, args.sessions, args.crowd_of)))
            found["30 sessions, one link: worst wait"] = [max(waits, default=float("inf"))]
            print(f"{args.sessions} {args.crowd_of} on one link: {line}, "
                  f"peak server memory {peak_memory_gb(process.pid):.2f} GB")  # fmt: skip
            waits, line = summary(asyncio.run(class_of_own_texts(url, args.sessions)))
            found["30 students, own 150-word texts within 10 s: worst wait"] = [max(waits, default=float("inf"))]
            print(f"{args.sessions} students with texts of their own, arriving over 10 s: {line}, "
                  f"peak server memory {peak_memory_gb(process.pid):.2f} GB")  # fmt: skip
            waits, line = summary(asyncio.run(class_of_own_texts(url, args.sessions, visit=COURSE, seed=9000)))
            found["30 students on the course's first step, own texts within 10 s: worst wait"] = [
                max(waits, default=float("inf"))
            ]
            print(f"{args.sessions} students opening the course with texts of their own, arriving over 10 s: {line}, "
                  f"peak server memory {peak_memory_gb(process.pid):.2f} GB")  # fmt: skip
            beside = [beside_a_sweep(url, seed) for seed in range(args.repeats)]
            found["short analysis beside a sweep"] = [in_browser for in_browser, _ in beside]
            found["short analysis beside a sweep, server side"] = [served for _, served in beside]
    report(found)


if __name__ == "__main__":
    main()
