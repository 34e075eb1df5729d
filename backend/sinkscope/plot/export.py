"""Figures for slides: any figure with a caption line (model, text, what it shows), as PNG or SVG.

Plotly's static export (Kaleido) drives the system's Chromium, found on the PATH or at ``BROWSER_PATH``: nothing
is downloaded at run time. The caption goes on a strip under the image, so a slide keeps its source.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import io
import logging
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import kaleido
import plotly.graph_objects as go
import psutil
from kaleido.errors import KaleidoError
from PIL import Image, ImageDraw, ImageFont

from sinkscope.core.errors import ExportError, reason_of
from sinkscope.core.tokens import visible
from sinkscope.plot.explore_figures import room_for_title

FORMATS = ("png", "svg")
WIDTH, HEIGHT = 1280, 720  # a 16:9 slide
PNG_SCALE = 2  # sharp on a projector
FIRST_WORDS = 8
CAPTION_PX = 32  # the strip under a slide that holds its caption
CAPTION_CHARS = 170  # what one line of 13 px text holds across a 1280 px slide
CAPTION_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # Debian's, beside Chromium; Pillow's otherwise
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
NOT_READY = "kaleido_scopes is not defined"  # Kaleido's JavaScript error when its page has not loaded yet
DRAW_ERRORS = (RuntimeError, ValueError, OSError, KaleidoError)  # Chromium missing or failing, a figure refused
RENDER_SECONDS = 90  # one render, Chromium's start included (Kaleido's own limit per image); a hung browser ends it
T = TypeVar("T")
Draw = Callable[[kaleido.Kaleido], Awaitable[T]]  # what to draw with an open browser
log = logging.getLogger(__name__)


def available() -> bool:
    """Whether a Chromium for the static export is here (``BROWSER_PATH``, or one on the PATH)."""
    return bool(os.environ.get("BROWSER_PATH") or any(shutil.which(name) for name in BROWSERS))


def first_words(text: str, words: int = FIRST_WORDS) -> str:
    """The text's first ``words`` words, with an ellipsis when it goes on."""
    split = text.split()
    return " ".join(split[:words]) + ("…" if len(split) > words else "")


def plain_title(fig: go.Figure) -> str:
    """The figure's title as plain text: no markup (line breaks become spaces), entities read back (``&lt;``)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fig.layout.title.text or "")).split())


def caption_line(model: str, text: str, shows: str) -> str:
    """'model · “first words…” · what the figure shows' (its title: layer, head, metric, in the viewer's language)."""
    line = " · ".join(part for part in (model, f"“{first_words(text)}”" if text.strip() else "", shows) if part)
    return line if len(line) <= CAPTION_CHARS else line[: CAPTION_CHARS - 1] + "…"


def captions(figures: dict[str, go.Figure], model: str, text: str) -> dict[str, str]:
    """Each named figure's caption line."""
    return {name: caption_line(model, text, plain_title(fig)) for name, fig in figures.items()}


def _font(size: int) -> ImageFont.FreeTypeFont:
    try:
        return ImageFont.truetype(CAPTION_FONT, size)
    except OSError:  # no DejaVu here: Pillow's own font
        return ImageFont.load_default(size=size)


def with_caption(data: bytes, fmt: str, caption: str) -> bytes:
    """The image with ``caption`` on a strip added under it: below everything Plotly drew, so nothing overlaps.
    Control and bidirectional characters are shown, not drawn (``tokens.visible``): an SVG stays XML."""
    caption = visible(caption, keep="")
    if fmt == "svg":
        svg, total = data.decode("utf-8"), HEIGHT + CAPTION_PX
        root_end = svg.index(">")  # the root element's size and viewBox grow by the strip
        root = svg[:root_end].replace(f'height="{HEIGHT}"', f'height="{total}"', 1)
        root = root.replace(f'viewBox="0 0 {WIDTH} {HEIGHT}"', f'viewBox="0 0 {WIDTH} {total}"', 1)
        strip = (f'<rect x="0" y="{HEIGHT}" width="{WIDTH}" height="{CAPTION_PX}" style="fill: #fff"/>'
                 f'<text x="16" y="{HEIGHT + 21}" style="font-family: DejaVu Sans, Arial, sans-serif; '
                 f'font-size: 13px; fill: #555">{html.escape(caption)}</text>')  # fmt: skip
        body = svg[root_end : svg.rindex("</svg>")]
        return (root + body + strip + "</svg>").encode("utf-8")
    image = Image.open(io.BytesIO(data)).convert("RGB")
    canvas = Image.new("RGB", (image.width, image.height + CAPTION_PX * PNG_SCALE), "white")
    canvas.paste(image, (0, 0))
    font = _font(13 * PNG_SCALE)
    room = image.width - 32 * PNG_SCALE  # the caption's whole line fits between the margins, or ends in "…"
    while len(caption) > 1 and font.getlength(caption) > room:
        caption = caption[:-2] + "…"
    ImageDraw.Draw(canvas).text((16 * PNG_SCALE, image.height + 8 * PNG_SCALE), caption, fill="#555555", font=font)
    out = io.BytesIO()
    canvas.save(out, format="PNG")
    return out.getvalue()


def _scale(fmt: str) -> int:
    """PNG at twice the slide's pixels; SVG is drawn at its size."""
    return PNG_SCALE if fmt == "png" else 1


def _drawn(draw: Draw[T]) -> T:
    """``draw()``, once more when Kaleido's page was not ready; an ``ExportError`` when it fails."""
    try:
        return _bounded(draw)
    except DRAW_ERRORS as err:
        if NOT_READY not in str(err):
            raise _failed(err) from err
        log.info("Kaleido's page was not ready; drawing again")  # on a loaded machine it may render too early
    try:
        return _bounded(draw)
    except DRAW_ERRORS as err:
        raise _failed(err) from err


def _bounded(draw: Draw[T]) -> T:
    """``draw(browser)`` on an event loop of its own thread (a notebook's running loop is not ours), for at most
    RENDER_SECONDS, the browser closed whatever happens: Kaleido's helpers leave one that failed to start open,
    and the thread that reads its output then keeps the command from ever exiting."""

    async def within() -> T:
        browser = kaleido.Kaleido()
        try:
            return await asyncio.wait_for(_opened_and_drawn(browser, draw), RENDER_SECONDS)
        except BaseException:
            _end_processes(browser)  # a browser that failed may never answer the close below
            raise
        finally:
            await browser.close()

    start = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, within()).result()
    except DRAW_ERRORS as err:
        if time.monotonic() - start >= RENDER_SECONDS:  # cancelled: whatever Kaleido raised then, time ran out
            raise ExportError("export.timeout", seconds=RENDER_SECONDS) from err
        raise


def _end_processes(browser: kaleido.Kaleido) -> None:
    """Kill the browser's process and every process it started (a wrapper runs Chromium, Chromium its helpers)."""
    started = getattr(browser, "subprocess", None)  # absent when the browser was never started
    if started is None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(started.pid)
        for process in [*root.children(recursive=True), root]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
    started.wait()  # reaped: the close that follows sees it ended and sends it nothing


async def _opened_and_drawn(browser: kaleido.Kaleido, draw: Draw[T]) -> T:
    await browser.open()
    return await draw(browser)


def _failed(err: Exception) -> ExportError:
    log.debug("Static export failed: %r", err)  # the error's own message is what the user sees
    return ExportError("export.failed", error=reason_of(err))


def image(fig: go.Figure, fmt: str, caption: str) -> bytes:
    """``fig`` at slide size as ``fmt`` ("png" or "svg") bytes with ``caption`` under it; an ``ExportError`` when
    Chromium cannot draw it."""
    if fmt not in FORMATS:
        raise ExportError("export.unknown_format", fmt=fmt, formats=", ".join(FORMATS))
    opts = {"format": fmt, "width": WIDTH, "height": HEIGHT, "scale": _scale(fmt)}
    drawn = _drawn(lambda browser: browser.calc_fig(room_for_title(go.Figure(fig)).to_dict(), opts=opts))
    return with_caption(drawn, fmt, caption)


def write_all(
    figures: dict[str, go.Figure], captions: dict[str, str], folder: Path, formats: tuple[str, ...]
) -> list[Path]:
    """Each figure written as ``folder/<name>.<fmt>`` for every format, drawn in one Chromium session, with its
    caption under it."""
    folder.mkdir(parents=True, exist_ok=True)
    specs = [
        {"fig": room_for_title(go.Figure(fig)).to_dict(), "path": folder / f"{name}.{fmt}",
         "opts": {"format": fmt, "width": WIDTH, "height": HEIGHT, "scale": _scale(fmt)}}
        for name, fig in figures.items() for fmt in formats
    ]  # fmt: skip
    # Kaleido itself, not plotly's write_images: that one drops a figure's render error and writes no file
    _drawn(lambda browser: browser.write_fig_from_object(specs, cancel_on_error=True))
    for spec in specs:
        path = spec["path"]
        path.write_bytes(with_caption(path.read_bytes(), spec["opts"]["format"], captions[path.stem]))
    return [spec["path"] for spec in specs]
