"""A printable handout of one text: the sink rate, the head map and kind counts, a sink head and a diagonal head,
the claims scoreboard and the metric definitions, as one self-contained HTML page that prints on PRINTED_PAGES A4
pages (print it, or save it as PDF).

Everything is drawn without a browser at build time: the head map and the kinds are the HTML figures, the two
heads are PNG images of their attention maps, so the page prints the same anywhere.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

import numpy as np
from markdown_it import MarkdownIt
from PIL import Image

from sinkscope.core.i18n import Text
from sinkscope.core.names import DEFAULT_EPS, KIND_THRESHOLD, STATUS_KEYS, STATUSES
from sinkscope.core.tokens import visible
from sinkscope.plot.html_figures import FIGURES_CSS, head_map_html, kind_counts_html
from sinkscope.plot.slides import TITLES, Head

LIGHT, DARK = np.array([247, 251, 255]), np.array([8, 48, 107])  # the ends of the maps' "Blues" scale
MAP_PIXELS = 360  # an attention map's side at least, in image pixels
PRINTED_TOKENS = 48  # an example head prints its first 48 queries and keys: a cell of 1 mm shows a sink's column
PRINT_CSS = """
body { font-family: system-ui, "DejaVu Sans", sans-serif; color: #222; max-width: 190mm; margin: 1.5rem auto; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { font-size: 1.2rem; margin-top: 1.6rem; }
.meta { color: #555; } blockquote { border-left: 3px solid #ccc; margin: 0.6rem 0; padding-left: 0.8rem; }
.heads { display: flex; gap: 1rem; align-items: flex-start; } .heads figure { margin: 0; width: 44mm; flex: none; }
.heads img { width: 100%; image-rendering: pixelated; border: 1px solid #ddd; } .heads .definitions { flex: 1; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.4rem; text-align: left; vertical-align: top; }
.overview { display: flex; gap: 1.5rem; align-items: flex-start; } .overview > .ss-head-map { flex: 1 1 60%; }
@page { size: A4; margin: 12mm; }
@media print {
  * { print-color-adjust: exact; -webkit-print-color-adjust: exact; }  /* the maps' cells are backgrounds */
  body { margin: 0; font-size: 8.5pt; line-height: 1.25; } h1 { font-size: 15pt; margin: 0; }
  h2 { font-size: 11pt; margin: 3mm 0 1mm; } p { margin: 1mm 0; } .new-page { break-before: page; }
  figure, tr, .ss-figure { break-inside: avoid; } figcaption { font-size: 8pt; }
  blockquote { display: -webkit-box; -webkit-line-clamp: 3; -webkit-box-orient: vertical; overflow: hidden; }
  .ss-head-map .ss-body { grid-template-rows: auto 70mm auto auto auto; }
  table { font-size: 8pt; line-height: 1.2; } th, td { padding: 0.4mm 0.8mm; }
  .definitions { font-size: 8pt; } .definitions h2 { font-size: 9pt; margin: 0 0 1mm; }
  .definitions p, .definitions table { margin: 0 0 1mm; }
  .definitions th:nth-child(3), .definitions td:nth-child(3) { display: none; }  /* the web page has it */
}
"""
PRINTED_PAGES = 2  # what the handout promises: the figures and definitions on the first A4 page, the claims on the next
PRINTED_METRICS = ("sink", "diagonal", "previous_token", "kind")  # what its figures show
BOARD_COLUMNS = ("claims.col_claim", "claims.col_verdict", "claims.col_yours")  # what of the scoreboard prints


def attention_image(weights: np.ndarray) -> str:
    """A (query, key) attention map as a PNG data URL, each cell coloured on the maps' blue scale (0 to the map's
    largest weight), enlarged to print sharply."""
    weights = np.asarray(weights, dtype=np.float64)
    scaled = weights / max(float(np.nanmax(weights)), 1e-12)
    rgb = LIGHT + (DARK - LIGHT) * np.nan_to_num(scaled)[..., None]  # (query, key, 3)
    image = Image.fromarray(rgb.round().astype(np.uint8), mode="RGB")
    side = max(MAP_PIXELS // max(weights.shape), 1)
    image = image.resize((weights.shape[1] * side, weights.shape[0] * side), Image.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def definitions_html(markdown: str, shown: Sequence[str] = PRINTED_METRICS) -> str:
    """The definitions file's per-head section as HTML: its heading, its table cut to the ``shown`` metrics (and its
    header), and the paragraph after the table (sink heads against the sink rate), so it fits beside the heads."""
    section = next(part for part in markdown.split("\n## ") if "`sink`" in part)
    heading, body = section.split("\n", 1)
    blocks = [block for block in body.strip().split("\n\n") if block.strip()]
    table = next(i for i, block in enumerate(blocks) if block.startswith("|"))
    names = tuple(f"| `{name}` |" for name in shown)
    rows = [line for line in blocks[table].splitlines() if not line.startswith("| `") or line.startswith(names)]
    kept = "\n\n".join([f"## {heading}", "\n".join(rows), blocks[table + 1]])
    return MarkdownIt("commonmark").enable("table").render(kept)


def board(verdicts: Sequence[object], lang: str) -> tuple[list[str], list[list[str]], str]:
    """The scoreboard as it prints: (column titles, one row per claim: the claim, its verdict's word and what was
    measured here, the summary line); the reasons and the evidence stay on the scoreboard page. ``verdicts``:
    ``experiments.verdicts.Verdict`` (claim, status, measured), which figures never import."""
    tr = Text(lang)
    rows = [[tr(f"claims.{v.claim}"), tr(STATUS_KEYS[v.status]), v.measured.text(lang) if v.measured else "—"]
            for v in verdicts]  # fmt: skip
    counts = {status: sum(v.status == status for v in verdicts) for status in STATUSES}
    return [tr(key) for key in BOARD_COLUMNS], rows, tr("claims.summary", total=len(verdicts), **counts).strip("*")


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def heads_html(trace: object, heads: dict[str, tuple[Head, np.ndarray]], tr: Text) -> str:
    """The example heads' maps, each cut to its first PRINTED_TOKENS queries and keys, captioned with what they are."""
    figures = []
    for kind, ((layer, head), weights) in heads.items():
        shown = min(PRINTED_TOKENS, len(weights))
        title = tr(TITLES[kind], layer=layer, head=head, score=round(float(trace.heads[kind][layer, head]), 2))
        corner = tr("handout.corner", n=shown, total=len(weights))
        image = attention_image(np.asarray(weights)[:shown, :shown])  # (query, key): the map's top-left corner
        figures.append(f'<figure><img alt="{html.escape(title)}" src="{image}">'
                       f"<figcaption>{html.escape(title)} ({html.escape(corner)})</figcaption></figure>")  # fmt: skip
    return "".join(figures)


def handout_html(
    trace: object,
    heads: dict[str, tuple[Head, np.ndarray]],
    verdicts: Sequence[object],
    definitions: str,
    model: str,
    text: str,
    lang: str = "en",
    cut: bool = False,
) -> str:
    """The handout. ``heads``: kind -> ((layer, head), its attention map); ``verdicts``: the scoreboard's;
    ``definitions``: the metric definitions' Markdown; ``text``: what the analysis read (``tokens.analyzed_part``),
    ``cut`` when that is the beginning of a longer text."""
    tr = Text(lang)
    header, rows, summary = board(verdicts, lang)
    rate = tr("handout.rate", rate=round(trace.sink_rate(), 1), n=trace.n_tokens, eps=DEFAULT_EPS,
              threshold=KIND_THRESHOLD)  # fmt: skip
    return f"""<!doctype html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{html.escape(tr("handout.title"))}</title>
<style>{FIGURES_CSS}{PRINT_CSS}</style></head><body>
<h1>{html.escape(tr("handout.title"))}</h1>
<p class="meta">{html.escape(model)} · T = {trace.n_tokens}</p>
<blockquote>{html.escape(visible(text))}</blockquote>
{f'<p class="meta">{html.escape(tr("handout.cut", n=trace.n_tokens))}</p>' if cut else ""}
<h2>{html.escape(tr("handout.rate_heading"))}</h2>
<p>{html.escape(rate)}</p>
<div class="overview">{head_map_html(trace.heads, "sink", lang=lang)}
{kind_counts_html(trace.heads["kind"], lang=lang)}</div>
<h2>{html.escape(tr("handout.heads_heading"))}</h2>
<p>{html.escape(tr("handout.heads_note"))}</p>
<div class="heads">{heads_html(trace, heads, tr)}<div class="definitions">{definitions_html(definitions)}</div></div>
<h2 class="new-page">{html.escape(tr("claims.title"))}</h2>
{_table(rows, header)}
<p>{html.escape(summary)}</p>
</body></html>
"""
