"""The course in a real browser: every step in French, a shared step link, the presenter view, figures for slides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sinkscope.core.i18n import Text
from sinkscope.course import STEPS, reveals
from sinkscope.experiments.claims import CLAIMS
from sinkscope.plot.handout import PRINTED_PAGES

from tests.browser.helpers import ARTIFACTS, LOAD, click_until, layout_problems, settled, wait_for_analysis

SAID = {  # a sentence each step computes from the French example (the default in French: its first token is "Le")
    "map": "et il vaut au moins 0,5",
    "budget": "donne en moyenne",
    "reads": "Sur les 183 têtes puits",
    "massive": "du jeton 0",
    "origins": "construit l'activation massive du premier jeton",
    "break": "Perplexité",
    "streaming": "Sur 512 jetons de l'aide de Python",
    "kv": "la perte par jeton et la perplexité : cache float32",
    "kinds": "183 têtes puits",
    "cost": "alignés : la norme du puits",
    "lab": "sur BOS aux requêtes dormantes",
    "claims": f"Sur {len(CLAIMS)} affirmations",
}


OFF_TEXT = ("streaming", "cost", "lab")  # steps computed on Python's help, a synthetic sweep and the lab's runs


def step_heading(number: int) -> re.Pattern:
    return re.compile(rf"^Étape {number} sur {len(STEPS)} : ")


def test_the_course_walks_every_step_in_french_and_a_shared_step_reopens_as_left(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/course?lang=fr")
    for number, step in enumerate(STEPS, 1):
        expect(page.get_by_text(step_heading(number))).to_be_visible(timeout=LOAD)
        question = Text("fr")(f"course.{step.id}.question", **reveals.question_values(step))
        expect(page.get_by_text(question)).to_be_visible()
        reveal = page.get_by_role("button", name="Révéler")
        expect(reveal).to_be_disabled()  # a prediction comes first
        choice = Text("fr")(f"course.{step.id}.{step.choices[0]}", **reveals.choice_values(step))
        enabled = page.get_by_role("button", name="Révéler", disabled=False)
        click_until(page, page.get_by_text(choice, exact=True), enabled)
        click_until(page, reveal, reveal, gone=True)
        here = "Ce qui a été mesuré" if step.id in OFF_TEXT else "Sur ce modèle et ce texte"  # what it was computed on
        verdict = re.compile(rf"^(Exact : |Votre prédiction : .+ {here} : )")
        expect(page.get_by_text(verdict)).to_be_visible(timeout=LOAD)
        expect(page.get_by_text(SAID[step.id]).first).to_be_visible(timeout=LOAD)
        if number < len(STEPS):
            click_until(page, page.get_by_role("button", name="Suivante →"), page.get_by_text(step_heading(number + 1)))
    everything = ".".join(step.choices[0] for step in STEPS)
    expect(page).to_have_url(re.compile(rf"step={len(STEPS)}&answers={re.escape(everything)}"), timeout=LOAD)
    page.goto(page.url)  # a reload, or a student opening the shared link
    expect(page.get_by_text(step_heading(len(STEPS)))).to_be_visible(timeout=LOAD)
    expect(page.get_by_role("button", name="Révéler")).to_have_count(0)  # answered: the result shows again
    expect(page.get_by_text(SAID["claims"]).first).to_be_visible(timeout=LOAD)
    page.get_by_role("button", name="← Précédente").click()
    expect(page.get_by_text(step_heading(len(STEPS) - 1))).to_be_visible(timeout=LOAD)
    expect(page.get_by_text(re.compile(r"^Exact : Oui\.$"))).to_be_visible(timeout=LOAD)


def test_a_teacher_shares_a_step_unanswered_and_a_bad_step_is_named(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/course?lang=fr&step=7")
    expect(page.get_by_text(step_heading(7))).to_be_visible(timeout=LOAD)
    expect(page.get_by_role("button", name="Révéler")).to_be_disabled()
    page.goto(f"{app_url}/course?lang=en&step=42&answers=first.maybe")
    expect(page.get_by_text(re.compile(rf"^Step 1 of {len(STEPS)}: "))).to_be_visible(timeout=LOAD)
    expect(page.get_by_text(re.compile(r"step=42, answers=maybe"))).to_be_visible(timeout=LOAD)
    expect(page.get_by_test_id("stException")).to_have_count(0)


FIGURE_JS = """() => {
  const chart = document.querySelector('.stPlotlyChart'), box = chart.getBoundingClientRect();
  const size = selector => [...chart.querySelectorAll(selector)].map(e => parseFloat(getComputedStyle(e).fontSize));
  const prose = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stMarkdownContainer"] p')]
    .map(e => parseFloat(getComputedStyle(e).fontSize));
  return {height: box.height, bottom: box.bottom, smallest_tick: Math.min(...size('.xtick text, .ytick text')),
          smallest_legend: Math.min(...size('.legendtext'), 99), smallest_prose: Math.min(...prose)};
}"""
PROJECTED = 20  # px: text and legends a room reads on a 1080p projector (issue 51, item 6)


@pytest.mark.parametrize(("width", "height"), [(1280, 720), (1920, 1080)])
def test_the_presenter_view_hides_the_controls_and_cuts_nothing(browser: Browser, app_url: str, width: int,
                                                                height: int) -> None:  # fmt: skip
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        found = {}
        kinds = next(i for i, step in enumerate(STEPS) if step.id == "kinds")  # a step with a figure, answered
        for step, answers in ((1, "first"), (kinds + 1, "." * kinds + "sink")):
            page.goto(f"{app_url}/course?lang=fr&step={step}&answers={answers}&present=1")
            settled(page, sidebar=False)
            expect(page.get_by_test_id("stSidebar")).to_be_hidden()
            expect(page.locator(".stPlotlyChart")).to_have_count(1)  # one figure a screen
            found[f"step {step}"] = layout_problems(page)
            figure = page.evaluate(FIGURE_JS)
            assert figure["smallest_tick"] >= 18, figure  # item 6: read from the back of the room
            assert figure["smallest_legend"] >= PROJECTED, figure
            if height >= 1080:  # the figure fills its column, down to the figure menu and the buttons
                assert figure["height"] >= 0.6 * height and figure["bottom"] >= 0.8 * height, figure
                assert figure["smallest_prose"] >= PROJECTED, figure
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"presenter_step{step}_{width}x{height}.png"))
        claims = "." * (len(STEPS) - 1) + "most"  # the scoreboard step: a table, no figure
        page.goto(f"{app_url}/course?lang=fr&step={len(STEPS)}&answers={claims}&present=1")
        settled(page, sidebar=False)
        expect(page.locator("table").first).to_be_visible(timeout=LOAD)
        found["scoreboard"] = layout_problems(page)  # no column cut off
        tall = page.evaluate("() => document.documentElement.scrollHeight")
        assert tall <= 4 * height, tall  # 8,659 px at 1280x720 before: its rows a line or two now
        assert {where: problems for where, problems in found.items() if problems} == {}
    finally:
        context.close()


def test_the_head_map_downloads_as_png_and_svg_with_its_caption(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/?example=english")
    wait_for_analysis(page)
    page.get_by_role("button", name=re.compile("Figure")).first.click()
    files = {}
    for fmt in ("PNG", "SVG"):
        with page.expect_download(timeout=60_000) as download:
            page.get_by_role("button", name=fmt, exact=True).dispatch_event("click")  # the menu may open off-screen
        files[fmt] = Path(download.value.path()).read_bytes()
    assert files["PNG"].startswith(b"\x89PNG") and len(files["PNG"]) > 20_000
    svg = files["SVG"].decode("utf-8")
    assert svg.startswith("<svg") and len(svg) > 20_000
    assert "SmolLM2-135M-Instruct" in svg and "“The lighthouse keeper climbed the stairs every evening…”" in svg
    assert "sink score: " in svg  # the head map's title: its metric, by its display name


def test_the_handout_downloads_in_the_viewers_language_with_its_parts(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/handout?lang=fr")
    button = page.get_by_role("button", name=re.compile("Télécharger le polycopié"))
    expect(button).to_be_visible(timeout=LOAD)
    with page.expect_download(timeout=60_000) as download:
        button.click()
    handout = Path(download.value.path()).read_text(encoding="utf-8")
    assert '<html lang="fr">' in handout and "Le gardien du phare" in handout  # the French prose, by default
    assert f"Sur {len(CLAIMS)} affirmations" in handout and handout.count("data:image/png;base64,") == 2
    assert "Couche 18, tête 8 : le puits le plus fort" in handout
    expect(page.frame_locator("iframe").first.get_by_text("Taux de puits", exact=True)).to_be_visible()
    printed = page.context.new_page()  # T14: "one page to print" printed to 8 A4 pages; it promises two now
    printed.set_content(handout)
    pdf = printed.pdf(format="A4", prefer_css_page_size=True)
    printed.close()
    assert len(re.findall(rb"/Type\s*/Page[^s]", pdf)) <= PRINTED_PAGES
