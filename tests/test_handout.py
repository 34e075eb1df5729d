"""The printable handout, built from a tiny random model's trace (no browser, no real model)."""

from __future__ import annotations

import base64
import io
import re

from PIL import Image
from sinkscope.core.capture import analyze_ids, attention_maps
from sinkscope.core.i18n import Message
from sinkscope.core.tokens import analyzed_part, encode
from sinkscope.experiments.verdicts import Verdict
from sinkscope.plot import handout, slides
from transformers import AutoTokenizer

from tests.helpers import ROOT
from tests.tiny import tiny_loaded

BOARD = [Verdict("softmax_sink", "reproduces", Message.of("claims.yours.rate", rate=79.3, n=106, eps=0.3))]


def build(lang: str, text: str = "a <script>text</script>", cut: bool = False) -> tuple[str, object]:
    loaded = tiny_loaded("llama-gqa")
    ids = list(range(1, 20))
    trace = analyze_ids(loaded, ids)
    heads = {kind: ((layer, head), attention_maps(loaded, ids, layer).weights[head])
             for kind, (layer, head) in slides.example_heads(trace.heads).items()}  # fmt: skip
    definitions = (ROOT / "docs" / f"metrics{'' if lang == 'en' else '.' + lang}.md").read_text(encoding="utf-8")
    return handout.handout_html(trace, heads, BOARD, definitions, "tiny", text, lang=lang, cut=cut), trace


def test_the_handout_holds_the_rate_the_figures_two_heads_the_scoreboard_and_the_definitions() -> None:
    page, trace = build("fr")
    assert page.startswith("<!doctype html>") and '<html lang="fr">' in page
    assert "Les puits d&#x27;attention dans votre texte : un polycopié" in page
    assert f"eps 0,3, T = {trace.n_tokens})" in page  # the sink rate, written the French way
    assert page.count('class="ss-figure') >= 2  # the head map and the kinds, as printable HTML figures
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 2
    for data in images:
        picture = Image.open(io.BytesIO(base64.b64decode(data)))
        assert picture.width == picture.height and picture.width >= 19 * 18  # a cell per token pair, enlarged
    assert "taux de puits 79,3\u00a0% (eps 0,3, T = 106)" in page and "a &lt;script&gt;text&lt;/script&gt;" in page
    assert "<script" not in page  # the user's text and the table are data, never markup
    assert page.count("<table>") >= 2 and "<code>kind</code>" in page  # the scoreboard, the definitions
    assert "@page { size: A4" in page and "break-before: page" in page


def test_an_attention_map_prints_dark_where_the_weight_is() -> None:
    picture = Image.open(io.BytesIO(base64.b64decode(handout.attention_image([[1.0, 0.0], [0.5, 0.5]])[22:])))
    corners = picture.getpixel((0, 0)), picture.getpixel((picture.width - 1, 0))
    assert corners == (tuple(handout.DARK), tuple(handout.LIGHT))


def test_the_printed_definitions_are_those_of_what_the_handout_shows_and_the_maps_print_their_colours() -> None:
    """T14: the handout promised one page and printed eight; it keeps the definitions of the metrics its figures
    show, and prints the maps' cells (backgrounds, which browsers drop when printing unless told)."""
    page, _ = build("en")
    definitions = page[page.index('<div class="definitions">') :]
    for name in handout.PRINTED_METRICS:
        assert f"<code>{name}</code></td>" in definitions
    assert "<code>withheld</code></td>" not in definitions and "<code>value_sink</code></td>" not in definitions
    assert "print-color-adjust: exact" in page


def test_the_handout_shows_a_texts_control_and_bidirectional_characters_instead_of_obeying_them() -> None:
    page, _ = build("en", text="left \u202eright\x01")
    assert "left [U+202E]right␁" in page and "\u202e" not in page and "\x01" not in page


def test_a_truncated_texts_handout_holds_what_was_analyzed_and_says_so(tiny_dir: str) -> None:
    """Issue 38: the handout of a truncated text embedded the whole 204,800-character original (figures: T = 512)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    text = "Sinks park attention on the first token. " * 5000
    ids = encode(tokenizer, text, 64, truncate=True)
    read = analyzed_part(tokenizer, text, ids)
    assert text.startswith(read) and len(read) < 1000 and encode(tokenizer, read, 64) == ids
    short = "Sinks park attention."
    assert analyzed_part(tokenizer, short, encode(tokenizer, short, 64)) == short
    page, trace = build("en", read, cut=True)
    assert len(page) < 200_000 and f"read its first {trace.n_tokens} tokens" in page
    assert "read its first" not in build("en")[0]
