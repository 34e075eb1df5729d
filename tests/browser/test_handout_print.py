"""Issue 51, item 6: the handout prints on two A4 pages for the longest text the box accepts, in every language, with
its maps printed as maps and its second page at a readable size (Chromium's print, the bundled model)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from playwright.sync_api import Page
from sinkscope.core.capture import analyze_ids, attention_maps
from sinkscope.core.i18n import LANGUAGES
from sinkscope.core.names import POLARIZE_VARIANTS
from sinkscope.core.texts import builtin_text
from sinkscope.core.tokens import analyzed_part
from sinkscope.experiments import claims, interventions, kv_check, kv_evict, kv_heads, nudges
from sinkscope.experiments.kv_quant import ClaimRuns
from sinkscope.plot import handout, slides
from sinkscope.serving.settings import Settings

from tests.helpers import ROOT
from views.widgets import lab_polarization, lab_training, sink_cost

pytestmark = [pytest.mark.browser, pytest.mark.bundled, pytest.mark.slow]

MM = 96 / 25.4  # CSS pixels per millimetre
READABLE = 8 * 96 / 72  # 8 pt in CSS pixels
PRINT_JS = """() => {
  const second = document.querySelector('.new-page');
  const after = [...document.querySelectorAll('.new-page ~ *, .new-page ~ * *')].filter(e => e.textContent.trim());
  const cells = [...document.querySelectorAll('.ss-head-map .ss-cells > i')];
  const heads = [...document.querySelectorAll('.heads img')].map(e => e.getBoundingClientRect().width);
  return {second: Math.min(...after.map(e => parseFloat(getComputedStyle(e).fontSize))),
          cell: Math.min(...cells.map(e => e.getBoundingClientRect().height)), heads};
}"""


def kv_evidence(layers: int, kv_heads_: int, heads: int) -> kv_check.KVCheck:
    """A KV check with the scoreboard's own shapes and numbers of the size it prints (its rows' lengths)."""
    tokens, budget = kv_check.TOKENS, kv_check.BUDGET
    eviction = kv_evict.Eviction(("h2o", "h2o_sinks"), budget, np.full((2, tokens - 1), 3.4567),
                                 np.ones((2, layers, kv_heads_, tokens), bool), np.full((1, 2, layers, kv_heads_), -1),
                                 np.array([0.987, 1.0]))  # fmt: skip
    needs = kv_heads.HeadNeeds(budget, np.full(tokens - 1, 2.9876), np.linspace(0.0, 0.05, layers * heads)
                               .reshape(layers, heads))  # fmt: skip
    return kv_check.KVCheck(eviction, needs, kv_heads.DuoPolicy(np.ones((layers, kv_heads_), bool),
                                                                 np.full(tokens - 1, 3.0123), 0.3141,
                                                                 np.full(tokens - 1, 2.9876)))  # fmt: skip


@pytest.fixture(scope="module")
def longest(smollm2: object) -> tuple:
    """The longest text the box accepts (cut to the server's token limit), its analysis, example heads and verdicts:
    real wherever they depend on the text, the server-wide checks at their printed size."""
    text = builtin_text()[: 200 * 1024]
    ids = smollm2.encode(text, Settings.from_env({}).max_tokens, truncate=True)
    trace = analyze_ids(smollm2, ids)
    layers = tuple(range(trace.shape[0]))
    intact = interventions.outcome(smollm2, ids, None)
    dense = interventions.outcome(smollm2, ids, interventions.ForceHeads(
        interventions.heads_of_kind(trace.heads["kind"], "all", layers), "uniform"))  # fmt: skip
    removed = interventions.outcome(smollm2, ids, interventions.default_drop(len(layers)))
    spread = nudges.Spread((5, 50, 500), np.geomspace(0.3, 40.0, 48).reshape(16, 3))
    evidence = claims.Evidence(
        trace, list(lab_training.shipped_runs("backcopy").values()),
        lab_polarization.polarize_runs(POLARIZE_VARIANTS, "logistic", (8, 16), 3000, 0.5, 0), sink_cost.shipped(),
        spread, {"dense": 17.5432, "window": 64.3621, "sinks": 21.6409}, (intact, dense), (intact, removed),
        ClaimRuns(intact.nll, intact.nll + 0.4321, intact.nll + 0.1234, len(ids) - 1, 1),
        kv_evidence(len(layers), 3, trace.shape[1]),
    )  # fmt: skip
    heads = {kind: ((layer, head), attention_maps(smollm2, list(ids), layer).weights[head])
             for kind, (layer, head) in slides.example_heads(trace.heads).items()}  # fmt: skip
    read = analyzed_part(smollm2.tokenizer, text, trace.token_ids)
    return trace, heads, claims.scoreboard(evidence), read


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_handout_of_the_longest_text_prints_on_two_pages_with_its_maps_and_a_readable_second_page(
    page: Page, longest: tuple, lang: str
) -> None:
    trace, heads, verdicts, read = longest
    definitions = (ROOT / "docs" / ("metrics.md" if lang == "en" else f"metrics.{lang}.md")).read_text("utf-8")
    document = handout.handout_html(trace, heads, verdicts, definitions, "SmolLM2-135M-Instruct", read, lang, True)
    page.set_content(document)
    pdf = page.pdf(format="A4", prefer_css_page_size=True)
    assert len(re.findall(rb"/Type\s*/Page[^s]", pdf)) == handout.PRINTED_PAGES
    page.emulate_media(media="print")
    page.set_viewport_size({"width": round(186 * MM), "height": 1000})  # A4 less the page's margins
    printed = page.evaluate(PRINT_JS)
    assert printed["second"] >= READABLE - 0.01, printed  # the scoreboard at 8 pt or more
    assert printed["cell"] >= 1 * MM, printed  # the head map's rows are cells, not a one-pixel line
    columns = min(handout.PRINTED_TOKENS, trace.n_tokens)
    assert all(width / columns >= 0.8 * MM for width in printed["heads"]), printed  # a sink's column shows
