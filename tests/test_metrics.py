"""Every metric of docs/metrics.md on hand-built inputs whose answer is known."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from sinkscope.core import metrics


def causal_uniform(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def all_on_first(n: int) -> np.ndarray:
    a = np.zeros((n, n))
    a[:, 0] = 1
    return a


def previous_token(n: int) -> np.ndarray:
    a = np.zeros((n, n))
    a[0, 0] = 1
    a[np.arange(1, n), np.arange(n - 1)] = 1
    return a


def test_known_heads_get_known_scores() -> None:
    maps = np.stack([all_on_first(6), np.eye(6), previous_token(6), causal_uniform(6)])
    scores = metrics.head_scores(maps)
    np.testing.assert_allclose(scores["sink"], [1, 0, 1 / 5, np.mean(1 / np.arange(2, 7))])
    np.testing.assert_allclose(scores["diagonal"], [0, 1, 0, np.mean(1 / np.arange(2, 7))])
    # previous_token starts at t=2, so the sink column of row 1 is not counted twice
    np.testing.assert_allclose(scores["previous_token"], [0, 0, 1, np.mean(1 / np.arange(3, 7))])
    np.testing.assert_allclose(scores["entropy"], [0, 0, 0, 1])
    kinds = metrics.head_kinds(scores["sink"], scores["diagonal"], scores["previous_token"])
    assert list(kinds) == ["sink", "diagonal", "previous_token", "mixed"]


def test_value_sink_is_the_share_of_output_from_the_first_token() -> None:
    maps = np.stack([causal_uniform(4)])
    norms = np.array([[0.0, 1.0, 1.0, 1.0]])
    assert metrics.head_scores(maps, norms)["value_sink"][0] == 0.0  # attends to a zero value: reads nothing
    norms = np.array([[3.0, 1.0, 1.0, 1.0]])
    expected = np.mean([3 / (3 + 1), 3 / (3 + 2), 3 / (3 + 3)])
    assert metrics.head_scores(maps, norms)["value_sink"][0] == pytest.approx(expected)


def test_entropy_is_normalized_by_the_visible_keys_of_a_sliding_window() -> None:
    n, window = 8, 3
    a = np.zeros((n, n))
    for t in range(n):
        lo = max(0, t - window + 1)
        a[t, lo : t + 1] = 1 / (t + 1 - lo)
    assert metrics.head_scores(a[None], window=window)["entropy"][0] == pytest.approx(1.0)
    assert metrics.head_scores(a[None])["entropy"][0] < 1.0


def test_previous_token_is_nan_for_two_tokens() -> None:
    assert np.isnan(metrics.head_scores(np.eye(2)[None])["previous_token"][0])


def test_sink_rate_counts_heads_strictly_above_eps() -> None:
    sink = np.array([[0.1, 0.3, 0.31], [0.9, 0.0, 0.5]])
    assert metrics.sink_rate(sink, 0.3) == pytest.approx(100 * 3 / 6)
    assert metrics.sink_rate(sink, 0.0) == pytest.approx(100 * 5 / 6)


def test_metrics_never_mutate_their_inputs() -> None:
    rng = np.random.default_rng(0)
    maps = rng.random((2, 5, 5))
    norms = rng.random((2, 5))
    h = rng.normal(size=(5, 7)).astype(np.float32)
    copies = [maps.copy(), norms.copy(), h.copy()]
    metrics.head_scores(maps, norms)
    metrics.layer_scores(h)
    metrics.token_cosine(h, scaled=True)
    for before, after in zip(copies, [maps, norms, h], strict=True):
        np.testing.assert_array_equal(before, after)


def test_layer_scores_on_a_hand_built_hidden_state() -> None:
    h = np.full((4, 500), 0.01, dtype=np.float32)
    h[0, 7] = -2000.0  # one massive activation on the first token
    h[2, 3] = 150.0  # over 100 but also over 1000 x median (0.01): massive too
    h[1, 5] = 5.0
    scores = metrics.layer_scores(h)
    assert scores["top1"] == pytest.approx(2000.0)
    assert scores["top2"] == pytest.approx(150.0)
    assert scores["top3"] == pytest.approx(5.0)
    assert scores["median_abs"] == pytest.approx(0.01)
    assert scores["massive"] == 2
    assert scores["massive_list"][0] == (0, 7, -2000.0)
    norms = np.linalg.norm(h, axis=1)
    assert scores["first_norm_ratio"] == pytest.approx(norms[0] / np.median(norms), rel=1e-5)


def test_median_is_numpys_mean_of_the_two_middle_values() -> None:
    h = np.array([[1.0, 2.0], [3.0, 10.0]], dtype=np.float32)
    assert metrics.layer_scores(h)["median_abs"] == pytest.approx(2.5)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 1001, 60000])
def test_ranked_values_equal_a_full_sort(n: int) -> None:
    rng = np.random.default_rng(n)
    scale = rng.choice(np.array([1e-40, 1e-3, 1.0, 1e3], dtype=np.float32), size=n)  # subnormals too
    values = np.abs(rng.standard_normal(n).astype(np.float32)) * scale
    values[: n // 3] = values[-1]  # ties
    values[n // 2 :: 7] = 0.0
    values[-1] = np.inf if n > 4 else values[-1]
    expected = np.sort(values)
    runs = [((n - 1) // 2, n // 2), (max(n - 3, 0), n - 1), (0, min(n, 5) - 1)]
    for (first, last), found in zip(runs, metrics.ranked(values, runs), strict=True):
        np.testing.assert_array_equal(found, expected[first : last + 1])
    median, top = metrics.median_and_top3(values)
    assert median == np.median(values.astype(np.float64))
    np.testing.assert_array_equal(top[: min(n, 3)], expected[::-1][:3])
    assert np.isnan(top[min(n, 3) :]).all()


def test_token_cosine_of_float32_states_equals_the_float64_definition() -> None:
    rng = np.random.default_rng(5)
    h = rng.normal(size=(300, 64)).astype(np.float32)
    h[:, 3] += 4.0  # a shared direction: cosines well away from 0
    h[7] = 0.0  # a zero row counts in no pair
    for scaled in (False, True):
        exact = metrics.token_cosine(h.astype(np.float64), scaled=scaled)
        assert metrics.token_cosine(h, scaled=scaled) == pytest.approx(exact, rel=1e-5)
    assert metrics.bos_cosine(h) == pytest.approx(metrics.bos_cosine(h.astype(np.float64)), rel=1e-5)


def test_token_cosine_matches_the_pairwise_definition() -> None:
    h = np.random.default_rng(3).normal(size=(6, 5))
    u = h[1:] / np.linalg.norm(h[1:], axis=1, keepdims=True)
    cos = u @ u.T
    pairs = cos[~np.eye(5, dtype=bool)]
    assert metrics.token_cosine(h) == pytest.approx(pairs.mean())
    identical = np.tile(h[1], (6, 1))
    assert metrics.token_cosine(identical) == pytest.approx(1.0)


def test_scaled_token_cosine_divides_each_channel_by_its_rms_without_centring() -> None:
    rng = np.random.default_rng(4)
    h = rng.normal(size=(50, 16))
    h[:, 0] += 1000.0  # one channel dominates every raw cosine
    assert metrics.token_cosine(h) > 0.99
    q = h[1:] / np.sqrt((h[1:] ** 2).mean(0))  # tokens in Q, each channel over its RMS
    u = q / np.linalg.norm(q, axis=1, keepdims=True)
    pairs = (u @ u.T)[~np.eye(49, dtype=bool)]
    assert metrics.token_cosine(h, scaled=True) == pytest.approx(pairs.mean())
    assert metrics.token_cosine(h, scaled=True) < 0.2
    blurred = np.tile(h[1], (6, 1)) + 1e-3 * rng.normal(size=(6, 16))
    assert metrics.token_cosine(blurred, scaled=True) > 0.99  # z-scoring would give about -1/(n-1) here


def test_bos_cosine_is_negative_when_the_first_token_points_away() -> None:
    h = np.array([[-1.0, 0.0], [1.0, 0.1], [1.0, -0.1], [1.0, 0.0]])
    assert metrics.bos_cosine(h) < -0.99


def test_value_scaled_rows_keep_their_size_so_a_silent_sink_fades() -> None:
    sink_head = all_on_first(4)[None]  # every query reads only the first token
    norms = np.array([[0.1, 2.0, 2.0, 2.0]])  # whose value is tiny
    np.testing.assert_allclose(metrics.value_weighted(sink_head, norms)[0, 1:, 0], 1.0)  # normalized: looks full
    np.testing.assert_allclose(metrics.value_scaled(sink_head, norms)[0, :, 0], 0.05)  # scaled: fades


def test_softmax_variants_on_a_hand_built_row() -> None:
    x = np.array([0.0, np.log(2.0), np.log(3.0)])  # e^x = 1, 2, 3
    np.testing.assert_allclose(metrics.softmax(x), [1 / 6, 2 / 6, 3 / 6])
    np.testing.assert_allclose(metrics.softmax_plus_one(x), [1 / 7, 2 / 7, 3 / 7])
    np.testing.assert_allclose(metrics.withheld_mass(metrics.softmax_plus_one(x)), 1 / 7)
    np.testing.assert_allclose(metrics.sink_logit_softmax(x, np.log(4.0)), [1 / 10, 2 / 10, 3 / 10])
    np.testing.assert_allclose(metrics.sink_logit_softmax(x, -60.0), metrics.softmax(x), atol=1e-12)
    np.testing.assert_allclose(metrics.sigmoid_attention(x, bias=-np.log(2.0)), [1 / 3, 1 / 2, 3 / 5])
    assert metrics.withheld_mass(metrics.softmax(x)) == pytest.approx(0.0)


def test_softmax_plus_one_is_softmax_with_a_silent_key() -> None:
    x = np.random.default_rng(0).normal(scale=4.0, size=(5, 9))
    with_key = metrics.softmax(np.concatenate([np.zeros((5, 1)), x], axis=1))
    np.testing.assert_allclose(metrics.softmax_plus_one(x), with_key[:, 1:], rtol=1e-12)
    np.testing.assert_allclose(metrics.softmax(np.full(4, 700.0)), 0.25)  # no overflow


DOCS = Path(__file__).resolve().parent.parent / "docs"
DEFINITIONS = ["metrics.md", "metrics.fr.md", "metrics.pt.md"]  # the reference and its translations


@pytest.mark.parametrize("name", DEFINITIONS)
def test_every_table_row_of_the_definitions_has_its_headers_columns(name: str) -> None:
    """A `|` inside a formula splits a Markdown table cell, and the page would cut the definition there."""
    lines = (DOCS / name).read_text(encoding="utf-8").split("\n")
    columns, checked = 0, 0
    for line in lines:
        if not line.startswith("|"):
            columns = 0
            continue
        cells = len(re.findall(r"(?<!\\)\|", line)) - 1
        columns = columns or cells  # the first row of a table is its header
        assert cells == columns, line[:80]
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("name", DEFINITIONS[1:])
def test_a_translation_defines_the_same_names_under_the_same_sections(name: str) -> None:
    """The first column of every table (the metric names) and the number of sections follow the reference."""

    def names(text: str) -> list[str]:
        return [line.split("|")[1].strip() for line in text.split("\n") if line.startswith("| `")]

    reference, translated = ((DOCS / n).read_text(encoding="utf-8") for n in (DEFINITIONS[0], name))
    assert names(translated) == names(reference) and len(names(reference)) > 15
    assert translated.count("\n## ") == reference.count("\n## ")


def test_value_scaled_past_the_sink_is_the_renormalized_rows_in_a_typical_values_units() -> None:
    """Written by hand: row t past key 0 is A[t, j] / sum_{i>=1} A[t, i] * n_j / median(n_1..)."""
    rng = np.random.default_rng(3)
    scores = np.where(np.tril(np.ones((5, 5))) > 0, rng.normal(size=(5, 5)), -np.inf)
    maps = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    norms = rng.uniform(0.5, 2.0, size=5)
    expected = np.full((5, 4), np.nan)
    typical = sum(sorted(norms[1:])[1:3]) / 2  # the median of four norms
    for row in range(1, 5):
        rest = sum(maps[row, 1:])
        for key in range(1, 5):
            expected[row, key - 1] = maps[row, key] / rest * norms[key] / typical
    np.testing.assert_allclose(metrics.value_scaled_past(maps, norms), expected, rtol=1e-12)
