"""Text from files and from anywhere in Unicode: clear refusals, no crashes, tokens shown literally."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sinkscope.core import metrics
from sinkscope.core.errors import InputError
from sinkscope.core.models import LoadedModel
from sinkscope.core.tokens import decode_text, display_tokens, encode, token_labels
from sinkscope.plot import escape, fig_attention

pytestmark = pytest.mark.slow  # see pytest.ini: which worker, and whether make check runs them


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x01\x02binary", "binary"),
        ("caf\u00e9".encode("latin-1"), "not UTF-8"),
        (b"   \n\t ", "empty"),
        (b"x" * 3000, "limit is 2 KB"),
    ],
)
def test_bad_files_are_refused_with_a_reason(data: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message):
        decode_text(data, "upload.txt", max_bytes=2048)


def test_a_utf8_file_with_a_byte_order_mark_reads_cleanly() -> None:
    assert decode_text("\ufeffhello".encode(), "bom.txt", 100) == "hello"


HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<b>bold</b> &amp; %{x}"]
UNICODE = ["emoji 🙂🚀👩‍👩‍👧", "עברית وعربية", "e\u0301 combining", "中文日本語한국어", "zero\u200bwidth\u200d"]


@pytest.mark.parametrize("text", HOSTILE + UNICODE)
def test_tokens_of_any_text_rebuild_it_and_escape_in_figures(smollm2: LoadedModel, text: str) -> None:
    ids = encode(smollm2.tokenizer, text, limit=1000, add_bos=False)
    tokens = display_tokens(smollm2.tokenizer, ids)
    assert len(tokens) == len(ids)
    if "\ufffd" not in smollm2.tokenizer.decode(ids):
        assert smollm2.tokenizer.decode(ids) == text
    labels = token_labels(tokens)
    fig = fig_attention(np.tril(np.ones((len(ids), len(ids)))), labels, labels, "t")
    for label in fig.data[0].x:
        assert "<" not in label and (label == escape(label) or "&" in label)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_display_never_fails_on_random_unicode(smollm2: LoadedModel, text: str) -> None:
    if not text.strip():
        with pytest.raises(InputError):
            encode(smollm2.tokenizer, text, limit=1000)
        return
    ids = encode(smollm2.tokenizer, text, limit=1000)
    tokens = display_tokens(smollm2.tokenizer, ids)
    assert all(isinstance(token, str) and token for token in tokens)


@st.composite
def attention_maps(draw: st.DrawFn) -> np.ndarray:
    n_heads, n_tokens = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    logits = np.random.default_rng(seed).normal(scale=draw(st.floats(0.1, 30)), size=(n_heads, n_tokens, n_tokens))
    logits = np.where(np.tril(np.ones((n_tokens, n_tokens))) > 0, logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


@settings(max_examples=80, deadline=None)
@given(attention_maps())
def test_head_scores_stay_in_range_on_random_attention(maps: np.ndarray) -> None:
    np.testing.assert_allclose(maps.sum(-1), 1.0)
    norms = np.abs(np.random.default_rng(0).normal(size=maps.shape[::2])) + 1e-3
    scores = metrics.head_scores(maps, norms)
    for name in ("sink", "diagonal", "entropy", "value_sink"):
        values = scores[name]
        if maps.shape[1] < 2:
            assert np.isnan(values).all()
            continue
        assert np.all((values >= -1e-9) & (values <= 1 + 1e-9)), name
    if maps.shape[-1] < 2:
        return
    renormalized = metrics.without_first_keys(maps)
    finite_rows = np.isfinite(renormalized).all(-1)
    np.testing.assert_allclose(renormalized[finite_rows].sum(-1), 1.0)
