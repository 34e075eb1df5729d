"""Issue 51: a sentence never tells another story than the numbers beside it (hand-built inputs, no model).

Each test names the contradiction it guards against, as a French lecturer found it on SmolLM2's default example.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import LANGUAGES, Text, catalogue, states
from sinkscope.core.metrics import MASSIVE_RATIO
from sinkscope.core.names import DEFAULT_EPS, KIND_THRESHOLD
from sinkscope.course import STEPS, reveals
from sinkscope.experiments import origin_claims, stream_plan
from sinkscope.experiments.claims import CLAIMS
from sinkscope.findings import heads, origins
from sinkscope.plot import fig_lines

from tests.helpers import ROOT


def layered(layer_sinks: list[float], massive_layer: int | None) -> Trace:
    """One head per layer with the given mean sink (its key_sink on token 0), and the first token's massive
    activation from ``massive_layer`` on."""
    n_layers, n_tokens = len(layer_sinks), 4
    sink = np.array(layer_sinks)[:, None]  # (layer, head)
    heads_ = {"sink": sink, "kind": np.where(sink >= KIND_THRESHOLD, "sink", "mixed").astype(object)}
    key_sink = np.zeros((n_layers, n_tokens))
    key_sink[:, 0] = layer_sinks
    massive = (
        () if massive_layer is None else tuple((layer, 0, 7, 900.0) for layer in range(massive_layer, n_layers + 1))
    )
    return Trace("m", tuple(range(n_tokens)), ("a", "b", "c", "d"), heads_, {}, massive,
                 np.zeros((n_layers + 1, n_tokens, 2)), np.zeros((n_layers, 1, n_tokens)), key_sink)  # fmt: skip


def test_the_sink_is_said_to_appear_where_it_does_before_the_write_that_makes_the_massive_activation() -> None:
    """Item 2: the step answered "block 11's MLP" while layers 3-9 already sank; the finding names both phases."""
    trace = layered([0.0, 0.1, 0.2, 0.6, 0.7, 0.5, 0.1, 0.0, 0.6, 0.8], massive_layer=8)
    found = origins.sink_phases(trace)
    assert (found.phases, found.onset, found.massive_from) == (((3, 5), (8, 9)), 3, 8)
    said = found.said().text("en")
    assert "in layers 3–5, 8–9" in said and "layer 3, reads h³, built by blocks 0–2" in said
    assert "massive activation appears only later, in h⁸" in said
    verdict = origin_claims.built_early(trace)
    assert verdict.measured.text("en") == said  # the scoreboard reads the same finding
    step = reveals.of_origins(trace, None)
    assert step.said[0].text("en") == said


def test_a_sink_that_follows_the_massive_activation_is_said_to() -> None:
    trace = layered([0.0, 0.0, 0.6, 0.7], massive_layer=1)
    said = origins.sink_phases(trace).said().text("en")
    assert "layer 2, reads h², built by blocks 0–1" in said and "is already there: it appears in h¹" in said
    assert origins.sink_phases(layered([0.6, 0.1], None)).said().text("en").endswith("no massive activation on "
                                                                                      "this text.")  # fmt: skip
    assert "built by no block (it is the embedding)" in origins.sink_phases(layered([0.6], None)).said().text("en")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_sink_head_and_the_sink_rate_are_two_measures_named_apart(lang: str) -> None:
    """Item 3: "67.8 % are sinks" and "sink rate: 79.3 %" on one step, with "more than 0.5" where the code says
    "at least": the rate is named as Gu et al.'s, says how it differs, and the kind's bar reads as the code compares."""
    trace = layered([0.5, 0.4, 0.9], None)  # the head at exactly 0.5 is a sink head; 0.4 counts only in the rate
    shown = reveals.of_map(trace)
    kinds_said, rate_said = (sentence.text(lang) for sentence in shown.said)
    tr = Text(lang)
    assert tr.num(66.7, "g") in kinds_said and tr.num(KIND_THRESHOLD, "g") in kinds_said
    assert {"en": "at least", "fr": "au moins", "pt": "pelo menos"}[lang] in kinds_said
    assert "Gu et al." in rate_said and tr.num(100.0, "g") in rate_said and tr.num(DEFAULT_EPS, "g") in rate_said
    assert tr.num(KIND_THRESHOLD, "g") in rate_said  # the sentence says where the two bars differ


def test_the_sink_heads_under_half_are_not_said_not_to_read_their_sink() -> None:
    """Item 1: right after "they read a little of it", the 80 heads were called "those that do not read their
    sink"; the range is named by its bar."""
    found = heads.sink_reading({"kind": np.array([["sink"] * 3], dtype=object), "sink": np.full((1, 3), 0.8),
                                "value_sink": np.array([[0.9, 0.3, 0.4]]),
                                "value_norm_ratio": np.full((1, 3), 0.2)})  # fmt: skip
    for lang in LANGUAGES:
        said = found.said().text(lang)
        assert not any(phrase in said for phrase in ("do not read", "ne lisent pas", "não leem")), said


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_reads_page_asks_instead_of_saying_the_sink_reads_nothing(lang: str) -> None:
    """Item 1: the page title "Le puits ne lit rien" over 103 of 183 sink heads reading over half their output
    from it; the handout's definitions called "reads almost nothing" the point to teach."""
    texts = catalogue(lang)
    for key in ("reads.title", "nav.reads_nothing", "course.origins.title"):
        assert texts[key].rstrip().endswith("?"), (key, texts[key])
    name = "metrics.md" if lang == "en" else f"metrics.{lang}.md"
    definitions = (ROOT / "docs" / name).read_text(encoding="utf-8")
    assert not any(point in definitions for point in ("teaching point", "point à enseigner", "A lição"))


@pytest.mark.parametrize("lang", LANGUAGES)
def test_each_ratio_of_the_massive_activation_names_its_measure(lang: str) -> None:
    """Item 4: "hundreds of times" (step 4), "thousands of times" (/massive), "up to 158x" (/reads-nothing) and
    "11,683 times" (step 4) are different measures; each names what it divides by, and the step's question states
    Sun et al.'s own threshold instead of a size of its own."""
    step = next(step for step in STEPS if step.id == "massive")
    question = Text(lang)(step.key("question"), **reveals.question_values(step))
    assert not any(word in question for word in ("hundreds", "centaines", "centenas"))
    assert Text(lang).num(MASSIVE_RATIO, "g") in question and "|h|" in question
    texts = catalogue(lang)
    assert "|h|" in texts["course.massive.said"] and "|h|" in texts["massive.intro"]  # one activation against all
    assert "|h|" not in texts["reads.paper_norm"]  # a whole state's norm against the median token's
    assert {"en": "median token", "fr": "jeton médian", "pt": "token mediano"}[lang] in texts["reads.paper_norm"]


def test_the_streaming_step_finishes_its_sentence_and_names_its_baseline() -> None:
    """Item 6: "rend la perplexité 3 fois plus" ended there, and the scoreboard's "3.7 times dense" used another
    baseline; the step's ratio is the window alone against the same cache keeping the first tokens."""
    said = reveals.of_streaming({"dense": 20.0, "window": 58.0, "sinks": 20.0}).said[0]
    assert said.text("fr").endswith("multiplie la perplexité par 2,9 (face au même cache qui les garde).")
    assert said.text("en").endswith("multiplies perplexity by 2.9 (against the same cache keeping them).")
    assert stream_plan.link_values() == {"tokens": "512", "sinks": "4", "window": "60",
                                         "methods": "dense,mask-window,mask-sinks"}  # fmt: skip


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_papers_reason_for_preferring_sinks_is_cited_not_stated(lang: str) -> None:
    """Item 10: /diagonals said "models prefer sinks: they cost less" over its own "partly" and a sink 3.5x dearer
    with random embeddings; the reason is the paper's, cited where it is said, and its authors spelled one way."""
    prefer = {"en": "prefer sinks", "fr": "préfèrent les puits", "pt": "preferem sorvedouros"}[lang]
    for key, said in catalogue(lang).items():
        for sentence in re.split(r"(?<!et al)\. ", said):
            assert prefer not in sentence or "et al." in sentence, (key, sentence)
        assert "Sukenik" not in said, key


def test_several_secondary_sinks_that_last_as_long_are_not_one_most_lasting() -> None:
    """Item 10: /origins called ',' at position 75 "the most lasting" while both secondary sinks lasted 7 layers."""
    tied = ((75, ",", 0.4), (40, ".", 0.2))  # (position, token, key_sink), both h^3 .. h^9
    sinks = tuple(origins.SecondarySink(j, token, 3, 9, share, 1.0, 0.5) for j, token, share in tied)
    found = origins.Secondary(((2, 12),), (1.0, 20.0), sinks)
    assert found.tied == 2
    said = found.said().text("en")
    assert "Of the 2 longest-lived, the one taking most attention: ',' at position 75" in said
    assert "longest-lived: ','" not in said


ROLES = {"label", "question", "definition", "instruction", "claim", "computed", "choice", "error"}
TITLE = re.compile(r"(^|\.|_)(title|heading)$|^nav\.|_title$|_heading$")  # a page's, a section's or a figure's
CITES = re.compile(r"et al\.|\(\d{4}\)|\d{4}\)|Xiao|StreamingLLM|DuoAttention|IntactKV|KVSink|arXiv|OpenAI")
ASSERTS = re.compile(r"\b(is|are|must|reads|forms?|grows|polarizes|prefers?|exists?|becomes|finds|builds|looks|"
                     r"makes|needs|carries|collects|costs|parks|switches)\b")  # fmt: skip
INDIRECT = re.compile(r"\**(What|Which|Where|How)\b")  # "What it reads": a topic, not a finding


def roles() -> dict[str, str]:
    path = ROOT / "backend" / "sinkscope" / "locales" / "roles.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_every_catalogue_key_is_tagged_with_what_kind_of_sentence_it_is() -> None:
    """Item 2: each key is a label, a question, a definition, an instruction, a paper's claim, a sentence computed
    from a verdict, a course choice or an error; a new key without a tag fails here."""
    tagged = roles()
    assert sorted(tagged) == sorted(catalogue("en")) and set(tagged.values()) <= ROLES


def test_no_title_asserts_a_finding_without_a_verdict_or_a_citation() -> None:
    """Item 2 (docs/architecture.md, "Titles ask; findings answer"): a title or heading names a topic, asks, cites a
    paper or is computed; "The sink reads nothing", "Softmax polarizes" or "A sink grows in training" would fail."""
    tagged, texts = roles(), catalogue("en")
    found = {}
    for key, role in tagged.items():
        if not TITLE.search(key):
            continue
        topic = re.sub(r"\{[^}]*\}", "", texts[key])
        if role not in {"label", "question", "claim", "computed"}:
            found[key] = role
        elif role == "label" and ASSERTS.search(topic) and not INDIRECT.match(topic):
            found[key] = texts[key]
    assert found == {}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_questions_ask_and_claims_cite_in_every_language(lang: str) -> None:
    texts, claim_titles = catalogue(lang), {f"claims.{claim}" for claim in CLAIMS}
    for key, role in roles().items():
        if role == "question":
            assert "?" in texts[key], (key, texts[key])
        elif role == "claim" and key not in claim_titles and not re.search(r"published|paper|source", key):
            assert CITES.search(texts[key]), (key, texts[key])  # a claim's own row cites it in "published"


def test_what_a_new_user_met_in_english_reads_as_a_number_or_a_dash() -> None:
    """Language items: "nan% of heads" on a one-token text, "norm is raised ()" with nothing inside, a two-layer
    model's layer axis at -0.5 and 1.5, a hyphen for a minus sign."""
    tr = Text("en")
    assert tr.percent(float("nan")) == "—" and tr.num(float("nan")) == "—" and tr.num(-0.27, ".2f") == "\u22120.27"
    assert states([]) == "—" and states([(3, 9), (12, 28)]) == "h³–h⁹, h¹²–h²⁸"
    axis = fig_lines([0, 1], {"sink": [0.1, 0.9]}, "t", "layer", "y").layout.xaxis
    assert (axis.dtick, axis.tickformat) == (1, "d")
