"""The pass key check (issue 52, item 3): the text holds its number where it says, the probability is the model's
own, and on SmolLM2 a sliding cache keeps its fluency while it loses the number."""

from __future__ import annotations

import math

import pytest
import torch
from sinkscope.core.errors import InputError
from sinkscope.experiments import passkey
from sinkscope.experiments.streaming import dense as dense_nll
from sinkscope.findings.words import RETRIEVES

from tests.helpers import open_page


def test_the_pass_key_text_asks_for_its_number_at_the_end(smollm2: object) -> None:
    text = passkey.passkey_text(smollm2, 256)
    assert len(text.ids) <= 256
    decoded = smollm2.tokenizer.decode(list(text.ids))
    assert decoded.count(passkey.KEY) == 3 and decoded.endswith("The pass key is " + passkey.KEY)
    assert smollm2.tokenizer.decode(list(text.ids[text.answer :])) == " " + passkey.KEY
    with pytest.raises(InputError, match="no room for filler"):
        passkey.passkey_text(smollm2, 40)


def test_the_probability_of_the_answer_is_the_models_own(smollm2: object) -> None:
    text = passkey.passkey_text(smollm2, 128)
    with torch.no_grad():
        log_probs = torch.log_softmax(smollm2.model(torch.tensor([text.ids])).logits[0].float(), -1)
    answer = range(text.answer, len(text.ids))
    expected = math.exp(sum(float(log_probs[t - 1, text.ids[t]]) for t in answer))  # token t from position t - 1
    rows = passkey.passkey_table(smollm2, 128, 64, progress=lambda rows, total: len(rows) < 1)  # the dense row only
    assert [row.cache for row in rows] == ["dense"]
    assert rows[0].probability == pytest.approx(expected, rel=1e-4)


@pytest.mark.slow
def test_on_smollm2_sinks_and_a_window_stream_fluently_and_lose_the_pass_key(smollm2: object) -> None:
    rows = {row.cache: row for row in passkey.passkey_table(smollm2, 256, 32)}
    assert rows["dense"].probability > RETRIEVES  # SmolLM2 retrieves it with every token kept
    assert not rows["sinks_window"].retrieves and rows["sinks_window"].perplexity < 1.5 * rows["dense"].perplexity
    assert rows["window"].perplexity > rows["sinks_window"].perplexity  # without its sinks, the window breaks
    with pytest.raises(InputError, match="never fills"):
        passkey.passkey_table(smollm2, 256, 512)


def test_the_kv_page_runs_the_pass_key_check(smollm2: object) -> None:
    at = open_page("kv")
    at.button(key="kv_passkey_run").click().run(timeout=600)
    shown = next(d.value for d in at.dataframe if "probability of the pass key" in d.value.columns)
    assert len(shown) == 1 + 3 + 4  # dense, the 2-bit cache's three protections, the four policies
    text = passkey.passkey_text(smollm2, passkey.LENGTHS[0])
    dense = math.exp(-float(sum(dense_nll(smollm2, list(text.ids))[text.answer - 1 :])))
    assert shown.iloc[0, 1] == f"{100 * dense:.1f}%"
    said = " ".join(m.value for m in at.markdown)
    assert "With a cache of 32 tokens, StreamingLLM's sinks + window reaches perplexity" in said
