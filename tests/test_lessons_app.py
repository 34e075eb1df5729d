"""App tests of the five why-sinks pages, on the real bundled model."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from sinkscope.core.bundled import DEFAULT_MODEL
from sinkscope.core.i18n import Text
from sinkscope.experiments import claims, stream_plan
from streamlit.testing.v1 import AppTest

from tests.helpers import ROOT, TIMEOUT, array, chart, go_to, html_figure, open_page, submit
from views.state import cache

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them


def table(at: AppTest, column: str) -> object:
    """The first data or static table with this column (AppTest does not expose dataframe keys)."""
    tables = [d.value for d in at.dataframe] + [s.value.reset_index() for s in at.table]
    return next(value for value in tables if column in value.columns)


def test_softmax_page_spends_one_unit_and_checks_softmax_plus_one() -> None:
    at = open_page("softmax")
    bars = chart(at, "sm_bars")["data"]
    sums = [array(bar["y"]).sum() for bar in bars]
    assert sums[0] == pytest.approx(1.0) and sums[1] < 1 and sums[2] < sums[1]  # softmax, +1, sink logit 2
    at.radio(key="sm_preset").set_value("one").run()
    clear = array(chart(at, "sm_bars")["data"][0]["y"])
    assert clear.argmax() == 2 and clear[2] > 0.9
    check = at.dataframe[0].value.to_numpy()  # softmax+1(x) and softmax([0, x])[1:], one row each
    np.testing.assert_allclose(check[0], check[1], rtol=1e-12)
    at.text_input(key="sm_scores").set_value("1, two, 3").run()
    assert not at.exception and "must be numbers" in at.error[0].value
    assert html_figure(at, "sm_withheld_map").title.startswith("withheld: ")


def test_softmax_captions_follow_the_numbers_and_typed_scores_are_your_own() -> None:
    at = open_page("softmax")
    at.radio(key="sm_preset").set_value("one").run()
    titles = [a["text"] for a in chart(at, "sm_bars")["layout"]["annotations"]]
    assert "withheld -" not in " ".join(titles) and "over one unit" in titles[3]  # sigmoid overspends here
    caption = next(c.value for c in at.caption if c.value.startswith("Softmax hands out"))
    scores = np.array([0.0, 0.1, 6.0, -0.1, 0.0, 0.2])  # the "one clear match" preset
    top = np.exp(scores).max() / np.exp(scores).sum()
    plus_one = 1 / (1 + np.exp(scores).sum())
    assert f"its strongest key gets {top:.3f}" in caption and f"Softmax+1 withholds {plus_one:.3f}" in caption
    at.text_input(key="sm_scores").set_value("0, 0, 9, 0").run()
    assert at.radio(key="sm_preset").value == "own"
    at.text_input(key="sm_scores").set_value("0.0, 4.0, 0.1, 0.0, 4.0, -0.1").run()
    assert at.radio(key="sm_preset").value == "two"


def test_softmax_page_shows_the_counterfactual_withheld_mass_of_the_chosen_head() -> None:
    at = open_page("softmax")
    at.slider(key="layer").set_value(10).run()
    at.slider(key="head").set_value(4).run()
    lines = chart(at, "sm_withheld")["data"]
    withheld, first = array(lines[0]["y"]), array(lines[1]["y"])
    assert lines[0]["name"] == "withheld by softmax+1" and len(withheld) == len(first) > 20
    assert ((withheld > 0) & (withheld < 1)).all()
    assert "Layer 10, head 4" in chart(at, "sm_withheld")["layout"]["title"]["text"]


def test_reads_nothing_page_puts_every_head_in_the_scatter_and_shows_key_geometry() -> None:
    at = open_page("reads-nothing", "random")
    points = sum(len(array(trace["x"])) for trace in chart(at, "rn_scatter")["data"][:4])
    assert points == 30 * 9
    norms = chart(at, "rn_key_norm")["data"]
    first, others = array(norms[0]["y"]), array(norms[1]["y"])
    assert len(first) == 30 and np.median(first / others) < 1  # the first key is short (Gu et al.)
    cosines = chart(at, "rn_key_cos")["data"]
    assert np.median(array(cosines[0]["y"])) > np.median(array(cosines[1]["y"]))  # yet queries point at it
    output = chart(at, "rn_output")["data"][0]
    assert len(array(output["y"])) > 20


def test_the_reads_nothing_page_counts_the_sink_heads_that_read_their_sink(smollm2: object) -> None:
    """C1: "the output comes from the little weight left on the other keys", beside sink heads whose value_sink
    is above 0.5 (103 of 183 on the French example)."""
    from sinkscope.core.capture import analyze

    examples = {e["id"]: e["text"] for e in json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))}
    for example in ("french", "python"):
        heads = analyze(smollm2, examples[example]).heads
        sinks = heads["kind"] == "sink"
        reading = int((sinks & (heads["value_sink"] > 0.5)).sum())
        said = " ".join(m.value for m in open_page("reads-nothing", example).markdown)
        nothing = int((sinks & (heads["value_sink"] < 0.1)).sum())
        little = int(sinks.sum()) - reading - nothing
        assert f"Of the {int(sinks.sum())} sink heads, {reading} take more than 0.5 of their output" in said, example
        assert f"{little} take from 0.1 to 0.5 (they read little from it) and {nothing} under 0.1" in said, example
        assert "The others read almost nothing" not in said  # T3: said of heads taking 0.22-0.50 of their output


def test_the_massive_page_says_when_the_sink_comes_before_the_massive_activations(smollm2: object) -> None:
    """C5 on the French example: sinks of 0.6-0.7 in layers 3-9, while the first flagged activation is in h^12."""
    from sinkscope.core.capture import analyze
    from sinkscope.core.metrics import nan_mean

    examples = {e["id"]: e["text"] for e in json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))}
    trace = analyze(smollm2, examples["french"])
    first = min(layer for layer, *_ in trace.massive)
    per_layer = nan_mean(trace.heads["sink"], axis=1)
    peak = int(np.nanargmax(per_layer[:first]))
    said = " ".join(m.value for m in open_page("massive", "french").markdown)
    assert "The sink does not wait for the flagged activations here." in said
    assert f"layer {peak} already has a mean sink score of {per_layer[peak]:.2f}" in said


def test_massive_page_zeroing_hurts_more_than_setting_the_mean() -> None:
    at = open_page("massive")
    # C5: sinks before the first massive activation are measured and said
    said = " ".join(m.value for m in at.markdown)
    found = re.search(r"Layers 0–(\d+) read only states with no activation over the threshold .* layer (\d+),? "
                      r"(already )?has a mean sink score of ([\d.]+)", said)  # fmt: skip
    assert found and int(found[2]) <= int(found[1])
    assert "17 flags over the threshold in 17 layers (h¹² to h²⁸), one activation" in said  # T7
    assert any("first flagged activation appears in h¹², of h⁰ … h³⁰" in c.value for c in at.caption)
    assert len(table(at, "channel")) > 0
    assert chart(at, "ma_top")["layout"]["yaxis"]["type"] == "log"
    submit(at, "Run the intervention")
    at.radio(key="ma_mode").set_value("mean")
    submit(at, "Run the intervention")
    runs = table(at, "run").set_index("run")
    assert len(runs) == 3
    assert "1 flagged activation (token, channel) set to zero, layers ≥ 12" in runs.index  # T7: the same one
    changes = runs["change"].to_numpy()
    assert changes[1] > changes[2]  # zero, then mean
    published = at.table[-1].value
    assert "→" in published.loc["perplexity when set to zero", "your model"]


def test_diagonals_page_forces_sink_heads_to_diagonal() -> None:
    at = open_page("diagonals")
    lines = {line["name"]: line for line in chart(at, "dg_depth")["data"]}
    assert len(lines) == 5 and "the same on the raw residual stream" in lines
    kinds = chart(at, "dg_output")["data"][0]
    assert "sink" in kinds["x"]
    submit(at, "Run the intervention")
    runs = table(at, "run")
    assert runs["change"].iloc[1] > 0.5  # turning every sink head into a diagonal costs the model
    assert len(chart(at, "dg_cosine")["data"]) == 2
    at.radio(key="dg_source").set_value("all")
    at.radio(key="dg_target").set_value("uniform")
    submit(at, "Run the intervention")
    assert len(table(at, "run")) == 3  # the second run joins the first
    # C4: the cost of turning sink heads into diagonals is said beside the dense run's
    said = " ".join(m.value for m in at.markdown)
    assert re.search(r"attend to themselves instead costs the model \+[\d.]+ nats", said)
    cosines = chart(at, "dg_cosine")["data"]
    assert len(cosines) == 3 and cosines[2]["name"] == "make 270 heads dense (uniform)"
    published = at.table[-1].value
    assert "→" in published.loc["sparse patterns curb oversmoothing", "your model"]
    # C2: the row says what the scoreboard counts, not a median over every layer
    assert re.fullmatch(r"first token's cosine ≤ 0 in \d+ of \d+ middle layers \(lowest −?[\d.]+\)",
                        published.loc["first token's cosine in middle layers", "your model"])  # fmt: skip


def test_diagonals_page_explains_an_empty_choice() -> None:
    at = open_page("diagonals")
    at.slider(key="dg_layers").set_value((0, 0))
    at.radio(key="dg_source").set_value("diagonal")
    submit(at, "Run the intervention")
    assert "No diagonal heads to change in layers 0–0" in at.warning[0].value  # layer 0 of SmolLM2 has none
    assert not any("run" in d.value.columns for d in at.dataframe)


def test_break_page_drops_keys_replaces_the_first_token_and_measures_sensitivity() -> None:
    at = open_page("break")
    submit(at, "Drop them")
    runs = table(at, "run")
    assert list(runs["run"])[1].startswith("drop the first key")
    sinks = chart(at, "br_compare_sinks")["data"]
    assert array(sinks[1]["y"])[2:].max() == 0  # no attention left on the first token in layers 2..
    at.radio(key="br_choice").set_value("\n")
    submit(at, "Replace it")
    assert "'↵'" in " ".join(table(at, "run")["run"])
    at.radio(key="br_choice").set_value("own")
    at.text_input(key="br_own").set_value("several words here")
    submit(at, "Replace it")
    assert "exactly one" in at.error[0].value
    submit(at, "Perturb both")
    values = [float(m.value) for m in at.metric[:2]]
    assert values[0] > values[1] > 0  # the sink token is the sensitive one
    published = table(at, "published")["your model"].tolist()
    assert "→" in published[0] and "→" in published[1] and published[2].endswith("x more change")


@pytest.mark.parametrize("page", ["softmax", "reads-nothing", "massive", "diagonals", "break", "origins"])
def test_every_lesson_handles_a_one_token_text_without_a_traceback(page: str) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"text": "Hello"})  # one token, and no BOS for SmolLM2
    at.run()
    go_to(at, page).run()
    assert not at.exception, at.exception
    for label in ("Run the intervention", "Drop them"):
        if any(b.label == label for b in at.button):
            submit(at, label)
            said = [e.value for e in at.error] + [w.value for w in at.warning]
            assert any("at least two tokens" in m or m.startswith("No sink heads") for m in said), said


VERDICT_WORDS = {"en": ("claim", "verdict", "✓ reproduces"), "fr": ("affirmation", "verdict", "✓ se reproduit"),
                 "pt": ("afirmação", "veredicto", "✓ reproduz")}  # fmt: skip


@pytest.mark.parametrize("lang", ["en", "fr", "pt"])
def test_the_claims_scoreboard_computes_a_verdict_for_every_claim(lang: str) -> None:
    # every claim's runs from a cold cache: 85 s on an idle 2-core machine, over 180 s on a loaded one
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=2 * TIMEOUT)
    at.query_params.update({"example": "english", "lang": lang})
    at.run()
    go_to(at, "claims").run()
    assert not at.exception, at.exception
    claim, verdict, reproduces = VERDICT_WORDS[lang]
    board = at.table[0].value.reset_index()
    assert len(board) == len(claims.CLAIMS) and board[claim].is_unique
    assert list(board.columns[:2]) == [claim, verdict]  # the verdict stands beside its claim
    assert board[verdict].iloc[0] == reproduces  # SmolLM2 sinks: 70% of heads at eps 0.3
    assert board[verdict].iloc[4] == reproduces  # the half-space condition, measured where attention reads
    assert board[verdict].iloc[9] == reproduces  # the shipped Bigram-Backcopy softmax runs
    assert board[verdict].iloc[10] == reproduces  # the learned sink logit takes the dormant mass
    assert board[verdict].iloc[11] != reproduces  # the gate closes, but BOS keeps 0.3-0.6 (Qiu et al.: 0.048)
    assert board[verdict].iloc[claims.CLAIMS.index("secondary_sinks")] == reproduces  # "the", h^2-h^9
    partly = Text(lang)("claims.partly")  # 2 bits, causal, pooled with 3 built-in texts: 26.4 bare, 24 kept, 21.9
    assert board[verdict].iloc[claims.CLAIMS.index("kv_sinks")].startswith(partly)  # float: 51% back, 28-70% (52)
    assert board[verdict].iloc[claims.CLAIMS.index("h2o_first")] == reproduces  # kept in 100% of the caches of 32
    assert board[verdict].iloc[claims.CLAIMS.index("heads_stream")] == reproduces  # 97% alone; together 19.3 vs 17.7
    assert f"{Text(lang).metric('value_sink')} >" in board.iloc[1, 2]  # C1: sink heads reading their sink
    assert board.iloc[:, 3].str.len().min() > 1  # every claim shows the evidence it rests on
    links = [urlsplit(cell.split("](")[1].rstrip(")")) for cell in board.iloc[:, -1]]
    assert {link.path for link in links} <= {"/softmax", "/reads-nothing", "/streaming", "/lab", "/diagonals",
                                              "/massive", "/break", "/origins", "/kv"}  # fmt: skip
    for link in links:  # each page opens on this language, text and model
        query = parse_qs(link.query)
        assert query["lang"] == [lang] and query["example"] == ["english"] and query["model"] == ["smollm2-135m"]


def test_the_warm_start_leaves_the_scoreboard_only_what_depends_on_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve.py's warm start runs the streaming check (Python's help text, whatever the visitor typed); the page
    then reads that very result and runs only its text's runs."""
    cache.warm_examples()
    loaded = cache.cached_model(DEFAULT_MODEL, "auto")
    warmed = cache.shared().results.get(cache.streaming_check_job(loaded, DEFAULT_MODEL, "auto").cache_key)
    assert set(warmed) == {"dense", "window", "sinks"}

    def ran_again(*_: object) -> None:
        raise AssertionError("the scoreboard ran the streaming check again")

    monkeypatch.setattr(stream_plan, "check", ran_again)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"text": "A text of my own, which no earlier visitor has typed."})
    go_to(at, "claims").run()
    assert not at.exception, at.exception
    row = at.table[0].value.loc[Text("en")("claims.streaming")]
    assert row.iloc[1] == claims.from_streaming(warmed).measured.text("en")
