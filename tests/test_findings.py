"""Findings computed once (sinkscope.findings) on hand-built arrays: the words' thresholds, the sink heads that
read their sink, the massive activations counted as flags and as activations (issue 36: T2, T3, T4, T7, T8)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sinkscope.core.i18n import LANGUAGES, Message, Text
from sinkscope.experiments import claims
from sinkscope.experiments.nudges import Spread
from sinkscope.findings import heads, residual, words


def sink_heads(value_sink: list[float], kinds: list[str] | None = None) -> dict[str, np.ndarray]:
    n = len(value_sink)
    return {
        "kind": np.array([kinds or ["sink"] * n], dtype=object),
        "sink": np.full((1, n), 0.8),
        "value_sink": np.array([value_sink]),
        "value_norm_ratio": np.full((1, n), 0.2),
    }


@pytest.mark.parametrize(("part", "whole", "word"), [(9, 14, "most"), (7, 14, "half"), (5, 14, "half"),
                                                     (4, 14, "few"), (0, 0, "few")])  # fmt: skip
def test_most_means_more_than_half(part: int, whole: int, word: str) -> None:
    assert words.share_word(part, whole) == word


def test_the_words_of_a_change_have_one_threshold_each() -> None:
    assert [words.loss_word(c) for c in (0.05, -0.05, 0.18, 1.04)] == ["barely", "barely", "some", "lot"]
    assert [words.perplexity_word(r) for r in (1.0, 1.2, 2.0, 3.7)] == ["same", "little", "explodes", "explodes"]
    assert [words.compare(a, 1.0, "up", "down") for a in (1.3, 1.2, 0.7)] == ["up", "same", "down"]


def test_sink_heads_are_counted_by_how_much_they_read_their_sink() -> None:
    """T3: heads taking 0.22-0.50 of their output from the sink read little, not "almost nothing"."""
    found = heads.sink_reading(sink_heads([0.9, 0.6, 0.22, 0.39, 0.5, 0.05], ["sink"] * 5 + ["mixed"]))
    assert (found.sinks, found.reading, found.little, found.nothing) == (5, 2, 3, 0)
    assert found.others == pytest.approx((0.22, 0.39, 0.5))
    assert found.clearest == (0, 0)
    said = found.said().text("en")
    assert "2 take more than 0.5 of their output" in said and "3 take from 0.1 to 0.5" in said
    assert "0 under 0.1 (they read almost nothing from it)" in said
    assert "from 0.22 to 0.50 (median 0.39)" in said  # two decimals, as the catalogue asks ({low:.2f})


def test_a_sink_head_under_a_tenth_reads_almost_nothing() -> None:
    found = heads.sink_reading(sink_heads([0.05, 0.08, 0.3]))
    assert (found.reading, found.little, found.nothing, found.clearest) == (0, 1, 2, None)


def test_every_sink_head_reading_its_sink_is_said_so() -> None:
    found = heads.sink_reading(sink_heads([0.9, 0.7]))
    assert found.said().key == "reads.all_read"
    assert heads.sink_reading(sink_heads([0.1], ["mixed"])).said().key == "reads.no_sink_heads"


def flags(n_layers: int, cells: list[tuple[int, int]]) -> tuple[tuple[int, int, int, float], ...]:
    return tuple((layer, token, channel, 900.0 + layer) for layer in range(2, 2 + n_layers) for token, channel in cells)


def test_seventeen_flags_of_one_activation_are_one_activation() -> None:
    """T7: the course's "17 of 17 flagged activations" and the intervention's "1 massive activation" are both
    true: 17 flags, one per layer, of one (token, channel) activation; one sentence says both."""
    layers = {"median_abs": np.full(20, 0.5), "top1": np.full(20, 950.0)}
    found = residual.massive(flags(17, [(0, 507)]), layers)
    assert (found.flags, found.cells, found.layers, found.on_first) == (17, ((0, 507),), tuple(range(2, 19)), 17)
    said = residual.counted(found).text("en")
    assert said.startswith("17 flags over the threshold in 17 layers (h² to h¹⁸), one activation")
    assert "channel 507 of token 0" in said and said.endswith("17 of the 17 flags sit on the first token.")
    assert "uma só ativação seguida" in residual.counted(found).text("pt")
    two = residual.massive(flags(3, [(0, 507), (5, 9)]), layers)
    assert (two.flags, len(two.cells), two.on_first) == (6, 2, 3)
    assert "2 distinct activations" in residual.counted(two).text("en")


def test_before_the_first_flag_a_state_can_already_be_huge() -> None:
    """T8: top |h| about 800 against a median of 1.2-2 is hundreds of times the median: huge, though below Sun
    et al.'s threshold; the sentence must say so instead of "before any channel is huge"."""
    layers = {"median_abs": np.array([0.1, 1.2, 2.0, 2.0]), "top1": np.array([0.9, 802.0, 790.0, 25000.0])}
    sink = np.array([[0.1, 0.1], [0.8, 0.9], [0.9, 0.9], [0.9, 0.9]])
    found = residual.sink_before({"sink": sink}, layers, first=3)
    assert (found.peak, found.huge_layer, round(found.huge_ratio)) == (2, 1, 668)
    assert found.early and found.huge
    said = found.said().text("en")
    assert "They are already huge there: h¹ holds 802, 668 times its median |h|" in said
    assert "before any channel of it is huge" not in said
    quiet = residual.sink_before({"sink": sink}, {**layers, "top1": np.array([0.9, 30.0, 40.0, 25000.0])}, 3)
    assert not quiet.huge and "No channel is huge there yet" in quiet.said().text("en")
    assert residual.sink_before({"sink": sink}, layers, first=0) is None


@pytest.mark.parametrize("lang", LANGUAGES)
def test_counts_pick_their_word_by_cldr_plural_rules(lang: str) -> None:
    """Item 5: "1 cabeça", not "1 cabeças"; the word follows CLDR's category (Portuguese 0 is "one")."""
    one = Message.of("course.kinds.said", sinks=2, diagonals=1, heads=270).text(lang)
    expected = {"en": "1 diagonal head,", "fr": "1 tête diagonale,", "pt": "1 cabeça diagonal,"}
    assert expected[lang] in one
    assert Text(lang).plural(0, {"one": "a", "other": "b"}) == ("a" if lang in ("fr", "pt") else "b")


def test_numbers_use_one_thousands_separator_per_language() -> None:
    assert [Text(lang).num(24947.36, "g") for lang in LANGUAGES] == ["24,947.4", "24\u202f947,4", "24.947,4"]
    assert [Text(lang)("course.kinds.said", sinks=1200, diagonals=0, heads=2000)[:5] for lang in LANGUAGES] == [
        "1,200", "1\u202f200", "1.200"]  # fmt: skip


def test_the_thumbnails_caption_tells_a_diagonal_from_a_previous_token_line_and_counts_both() -> None:
    """T6: "a dark diagonal is a head that attends to itself" beside dozens of previous-token heads (whose dark
    line sits just below the diagonal) and one diagonal head; the caption now counts each kind."""
    kinds = np.array([["sink", "previous_token", "previous_token", "diagonal", "mixed"]], dtype=object)
    said = heads.kinds_seen(kinds).text("en")
    assert "a dark line just below the diagonal is a previous-token head" in said
    assert said.endswith("1 sink head, 1 diagonal head, 2 previous-token heads.")
    assert "1 cabeça diagonal, 2 cabeças do token anterior." in heads.kinds_seen(kinds).text("pt")


def test_one_perturbation_is_placed_against_the_scoreboards_spread() -> None:
    """T9: the break page's one run said "247.1x more" beside a scoreboard whose median is 2.2x and whose 80%
    interval ends at 23x: the page now places its run against the same spread the scoreboard reports."""
    ratios = np.array([[0.2, 0.25, 1.0, 2.2, 2.2, 3.0, 23.0, 30.0]] * 3).T  # (direction, position)
    spread = Spread((12, 24, 36), ratios)
    low, high = spread.interval()
    said = spread.place(247.1).text("en")
    assert f"the median ratio is {Text('en').times(spread.median())}" in said
    assert f"{spread.share}% of the ratios lie between {Text('en').times(low)} and {Text('en').times(high)}" in said
    assert said.endswith("This run, 247.1x more, lies above it: an unusually strong draw.")
    assert spread.place(2.0).text("en").endswith("lies inside that range.")
    evidence = claims.from_sensitivity(spread).evidence.text("en")
    assert f"between {Text('en').times(low)} and {Text('en').times(high)}" in evidence  # the scoreboard's numbers


@pytest.mark.parametrize("name", ["metrics.md", "metrics.fr.md", "metrics.pt.md"])
def test_every_words_threshold_is_defined_in_the_docs(name: str) -> None:
    """The words' thresholds are named once in findings.words and defined for users in docs/metrics.md."""
    text = (Path(__file__).resolve().parent.parent / "docs" / name).read_text(encoding="utf-8")
    constants = [key for key, value in vars(words).items() if key.isupper() and isinstance(value, float)]
    assert len(constants) >= 10 and [key for key in constants if f"`{key}" not in text] == []
