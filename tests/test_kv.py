"""The KV-cache lab (issue 41): a quantized cache against a hand-written KIVI quantizer run through transformers'
own eager attention, protected tokens kept bit for bit, and the bundled model's cache needing its sinks."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable

import numpy as np
import pytest
import torch
from sinkscope.core import attention
from sinkscope.core.errors import InputError, ModelLoadError
from sinkscope.core.loss import mean_difference, perplexity
from sinkscope.core.models import LoadedModel, model_info
from sinkscope.core.texts import builtin_text
from sinkscope.experiments import kv_evict, kv_quant
from transformers import AttentionInterface, AttentionMaskInterface, AutoModelForCausalLM
from transformers.cache_utils import Cache, DynamicLayer
from transformers.masking_utils import eager_mask

from tests.helpers import array, chart, english, open_page, submit
from tests.tiny import N_TOKENS, build, loaded_tiny, slow_loaded


@pytest.fixture(scope="module")
def ids() -> list[int]:
    return np.random.default_rng(11).integers(3, 96, size=N_TOKENS).tolist()


def by_hand(x: np.ndarray, bits: int, kept: np.ndarray, group: int, keys: bool) -> np.ndarray:
    """KIVI's quantizer one group at a time: (kv_head, token, head_dim), keys per channel over token groups, values
    per token over channel groups; a kept token is copied and left out of its group's range."""
    out = x.copy()
    levels = 2**bits - 1
    n_kv, n_tokens, width = x.shape
    for h in range(n_kv):
        for first in range(0, n_tokens if keys else width, group):
            if keys:  # one range per channel over a group of tokens
                rows = [t for t in range(first, min(first + group, n_tokens)) if not kept[t]]
                groups = [[(t, c) for t in rows] for c in range(width)]
            else:  # one range per token over a group of channels
                groups = [[(t, c) for c in range(first, min(first + group, width))] for t in range(n_tokens)
                          if not kept[t]]  # fmt: skip
            for cells in groups:
                if not cells:
                    continue
                values = np.array([x[h, t, c] for t, c in cells])
                low, high = values.min(), values.max()
                step = (high - low) / levels
                for (t, c), v in zip(cells, values, strict=True):
                    out[h, t, c] = low if step == 0 else np.round((v - low) / step) * step + low
    return out


def eager_with(quantize: object) -> str:
    """An attention function for transformers: the hand quantizer on K and V, then the family's own eager math."""

    def attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: object,
               **kwargs: object) -> tuple:  # fmt: skip
        key, value = (torch.from_numpy(quantize(x[0].double().numpy(), keys)).to(x.dtype)[None]
                      for x, keys in ((key, True), (value, False)))  # fmt: skip
        return sys.modules[type(module).__module__].eager_attention_forward(module, query, key, value, *args, **kwargs)

    AttentionInterface.register("hand_kv", attend)
    AttentionMaskInterface.register("hand_kv", eager_mask)  # eager's additive causal mask, as eager gets it
    return "hand_kv"


@pytest.mark.parametrize("bits", [2, 4])
@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma3"])
def test_the_non_causal_bound_equals_a_hand_quantized_cache(name: str, bits: int, ids: list[int]) -> None:
    kept = torch.zeros(len(ids), dtype=torch.bool)
    kept[[0, 7]] = True
    group = 8  # several groups over 40 tokens and 16-wide heads
    nll = kv_quant.quantized_nll(loaded_tiny(name), ids, bits, kept, group, residual=None)
    model = build(name, "eager")
    model.config._attn_implementation = eager_with(lambda x, keys: by_hand(x, bits, kept.numpy(), group, keys))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    expected = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").numpy()
    np.testing.assert_allclose(nll, expected, rtol=1e-4, atol=1e-4)


def first_layers(loaded: LoadedModel, n_layers: int) -> torch.nn.Module:
    """A copy of the model's first ``n_layers`` blocks, its embedding, final norm and head."""
    config = copy.deepcopy(loaded.model.config)
    config.num_hidden_layers = n_layers
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention.ATTENTION_NAME)
    model.load_state_dict(loaded.model.state_dict(), strict=False)  # the later blocks' weights have no place
    return model.eval().requires_grad_(False)


class HandKivi(DynamicLayer):
    """KIVI's Algorithm 1 as its decoding loop runs it, one token at a time: a new key waits in the residual until
    ``residual`` keys are there (one group with no residual), then they are quantized per channel, a group of tokens
    at a time; a value waits until ``residual`` newer ones follow, then is quantized alone, per token. Kept tokens
    stay as they are and are left out of their group's range."""

    def __init__(self, bits: int, group: int, residual: int, kept: np.ndarray) -> None:
        super().__init__()
        self.bits, self.group, self.residual, self.kept = bits, group, residual, kept
        self.keys_done, self.keys_waiting, self.values_done, self.values_waiting = [], [], [], []

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object) -> tuple:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        first = len(self.keys_done)  # the position of the oldest waiting key
        self.keys_waiting.append(key_states[0, :, 0].double().numpy())  # (kv_head, head_dim)
        self.values_waiting.append(value_states[0, :, 0].double().numpy())
        if len(self.keys_waiting) == (self.residual or self.group):
            block = np.stack(self.keys_waiting, 1)  # (kv_head, token, head_dim)
            kept = self.kept[first : first + block.shape[1]]
            self.keys_done += list(by_hand(block, self.bits, kept, self.group, keys=True).transpose(1, 0, 2))
            self.keys_waiting = []
        while len(self.values_waiting) > self.residual:
            position = len(self.values_done)
            value = self.values_waiting.pop(0)[:, None]  # (kv_head, 1, head_dim)
            kept = self.kept[position : position + 1]
            self.values_done.append(by_hand(value, self.bits, kept, self.group, keys=False)[:, 0])
        keys = np.stack(self.keys_done + self.keys_waiting, 1)  # (kv_head, token, head_dim)
        values = np.stack(self.values_done + self.values_waiting, 1)
        self.keys = torch.from_numpy(keys).to(key_states.dtype)[None]
        self.values = torch.from_numpy(values).to(value_states.dtype)[None]
        return self.keys, self.values


def decoded_nll(model: torch.nn.Module, ids: list[int], layer: Callable[[], DynamicLayer]) -> np.ndarray:
    """NLL of ids[1:] generated one token at a time through transformers' eager attention and ``layer``'s cache."""
    cache, logits = Cache(layers=[layer() for _ in range(model.config.num_hidden_layers)]), []
    with torch.no_grad():
        for token in ids[:-1]:
            out = model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            logits.append(out.logits[0, -1])
    return torch.nn.functional.cross_entropy(torch.stack(logits), torch.tensor(ids[1:]), reduction="none").numpy()


@pytest.mark.parametrize(("residual", "bits"), [(0, 2), (8, 2), (16, 4)])
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_the_causal_cache_equals_kivi_decoding_token_by_token(name: str, residual: int, bits: int,
                                                              ids: list[int]) -> None:  # fmt: skip
    kept = np.zeros(len(ids), dtype=bool)
    kept[[0, 9]] = True
    group = 8  # five groups over 40 tokens
    nll = kv_quant.quantized_nll(loaded_tiny(name), ids, bits, torch.from_numpy(kept), group, residual)
    expected = decoded_nll(build(name, "eager"), ids, lambda: HandKivi(bits, group, residual, kept))
    np.testing.assert_allclose(nll, expected, rtol=1e-4, atol=1e-4)
    bound = kv_quant.quantized_nll(loaded_tiny(name), ids, bits, torch.from_numpy(kept), group, residual=None)
    assert not np.allclose(bound, nll, atol=1e-3)  # the causal cache is not the old one


@pytest.mark.parametrize("residual", [0, 32])
def test_on_smollm2_s_first_layers_the_causal_cache_equals_kivi_decoding(smollm2: object, residual: int) -> None:
    model = first_layers(smollm2, 3)
    ids = list(english(smollm2).token_ids)[:72]  # two full groups and a part of one
    kept = np.zeros(len(ids), dtype=bool)
    kept[0] = True
    ours = LoadedModel(model, None, model_info(model, "smollm2-3", "smollm2-3"))
    nll = kv_quant.quantized_nll(ours, ids, 2, torch.from_numpy(kept), residual=residual)
    model.config._attn_implementation = "eager"
    expected = decoded_nll(model, ids, lambda: HandKivi(2, kv_quant.GROUP, residual, kept))
    np.testing.assert_allclose(nll, expected, rtol=1e-3, atol=1e-3)


def test_a_residual_that_is_not_whole_groups_is_refused(ids: list[int]) -> None:
    with pytest.raises(InputError, match=r"multiple of the group \(8 tokens\), not 12"):
        kv_quant.quantized_nll(loaded_tiny("llama"), ids, 2, torch.zeros(len(ids), dtype=torch.bool), 8, 12)


def test_a_protected_token_keeps_its_key_and_value_bit_for_bit() -> None:
    torch.manual_seed(0)
    key, value = torch.randn(2, 3, 40, 16) * 5, torch.randn(2, 3, 40, 16)
    key[..., 3, :] = 900.0  # a sink's huge key: kept out of its group's range
    kept = torch.zeros(40, dtype=torch.bool)
    kept[3] = True
    keys, values = kv_quant.quantize_keys(key, 2, kept, 8), kv_quant.quantize_values(value, 2, kept, 8)
    assert torch.equal(keys[..., 3, :], key[..., 3, :]) and torch.equal(values[..., 3, :], value[..., 3, :])
    assert (keys[..., 2, :] - key[..., 2, :]).abs().max() < 5 * 5 / 3  # its neighbours' range ignores the 900s
    assert not torch.equal(keys[..., 2, :], key[..., 2, :])  # ... and they are quantized


def test_protections_name_their_tokens_and_refuse_others() -> None:
    assert kv_quant.protected("first4", 10, (0, 6)).nonzero().ravel().tolist() == [0, 1, 2, 3]
    assert kv_quant.protected("sinks", 10, (0, 6, 12)).nonzero().ravel().tolist() == [0, 6]
    assert not kv_quant.protected("none", 10, (0,)).any()
    with pytest.raises(InputError, match="protect"):
        kv_quant.protected("all", 10, ())


def test_on_smollm2_a_two_bit_cache_needs_its_sinks_in_full_precision(smollm2: object) -> None:
    trace = english(smollm2)
    ids = list(trace.token_ids)
    sinks = kv_quant.detected_sinks(trace)
    assert 0 in sinks
    dense = perplexity(kv_quant.quantized_table(smollm2, trace, bits=(), protections=())[0].nll)
    bare = perplexity(kv_quant.quantized_nll(smollm2, ids, 2, kv_quant.protected("none", len(ids), sinks)))
    kept = perplexity(kv_quant.quantized_nll(smollm2, ids, 2, kv_quant.protected("sinks", len(ids), sinks)))
    assert kept < bare and kept < 2 * dense


def test_the_kv_page_quantizes_the_cache_and_says_what_the_sinks_buy(smollm2: object) -> None:
    trace = english(smollm2)
    at = open_page("kv")
    kept = next(c.value for c in at.caption if c.value.startswith("The detected sinks on this text"))
    assert all(f"{j}:" in kept for j in kv_quant.detected_sinks(trace))
    at.multiselect(key="kv_bits").set_value([2])
    submit(at, "Quantize the cache")
    shown = next(d.value for d in at.dataframe if "perplexity" in d.value.columns)
    assert len(shown) == 1 + len(kv_quant.PROTECTIONS)  # the dense cache, then each protection at 2 bits
    rows = kv_quant.quantized_table(smollm2, trace, (2,))
    np.testing.assert_allclose(shown["perplexity"].to_numpy(), [row.perplexity for row in rows], rtol=1e-4)
    assert kv_quant.said(rows).text("en") in " ".join(m.value for m in at.markdown)
    assert len(chart(at, "kv_curves")["data"]) == 1 + len(kv_quant.PROTECTIONS)


def rows_at_two_bits(first4: np.ndarray, sinks: np.ndarray) -> list[kv_quant.KVRow]:
    dense = np.random.default_rng(0).gamma(2.0, 1.5, size=200)  # per-token losses, as uneven as a text's
    return [kv_quant.KVRow(0, "none", dense), kv_quant.KVRow(2, "none", dense + 1.0),
            kv_quant.KVRow(2, "first4", dense + first4), kv_quant.KVRow(2, "sinks", dense + sinks)]  # fmt: skip


def test_a_best_protection_is_named_only_when_its_gap_is_wider_than_the_noise() -> None:
    noise = np.random.default_rng(1).normal(0.0, 0.3, size=200)  # token by token, the two caches differ at random
    tied = kv_quant.said(rows_at_two_bits(0.3 + noise, np.full(200, 0.3))).text("en")
    assert "differ by less than the noise" in tied and "keeping " in tied  # whichever is lower by chance
    clear = kv_quant.said(rows_at_two_bits(0.6 + noise, np.full(200, 0.3))).text("en")
    assert "below the first four tokens by more than the text's noise" in clear


def test_the_interval_of_two_identical_runs_holds_no_difference(smollm2: object) -> None:
    trace = english(smollm2)
    ids, kept = list(trace.token_ids), kv_quant.protected("none", trace.n_tokens, ())
    runs = [kv_quant.quantized_nll(smollm2, ids, 2, kept) for _ in range(2)]
    same = mean_difference(*runs)
    assert same.low <= 0.0 <= same.high and not same.excludes()
    jittered = mean_difference(runs[0] + np.random.default_rng(2).normal(0.0, 0.05, len(ids) - 1), runs[1])
    assert jittered.low < 0.0 < jittered.high  # noise of a twentieth of a nat, centred: no difference found


def test_a_family_on_the_slow_path_is_refused_in_one_sentence(ids: list[int]) -> None:
    with pytest.raises(ModelLoadError, match="slow path"):
        kv_quant.quantized_nll(slow_loaded("bloom"), ids, 2, torch.zeros(len(ids), dtype=torch.bool))


def test_the_kv_page_runs_the_eviction_policies_and_draws_what_each_keeps(smollm2: object) -> None:
    at = open_page("kv")
    at.select_slider(key="kv_tokens").set_value(128)
    at.select_slider(key="kv_budget").set_value(32)
    submit(at, "Run the four policies")
    shown = next(d.value for d in at.dataframe if "policy" in d.value.columns)
    assert len(shown) == len(kv_evict.POLICIES)
    ids = smollm2.encode(builtin_text(), 128, truncate=True, add_bos=False)
    found = kv_evict.evict(smollm2, ids, 32)
    np.testing.assert_allclose(shown["perplexity"].to_numpy(), [found.perplexity(i) for i in range(4)], rtol=1e-4)
    assert kv_evict.said(found).text("en") in " ".join(m.value for m in at.markdown)
    assert array(chart(at, "kv_kept")["data"][0]["z"]).shape == (len(kv_evict.POLICIES), len(ids))


def test_a_stopped_quantized_table_keeps_the_rows_it_measured(smollm2: object) -> None:
    trace = english(smollm2)
    seen = []
    rows = kv_quant.quantized_table(smollm2, trace, (2, 4), ("none",), progress=lambda so_far, total: seen.append(total)
                                    or len(so_far) < 2)  # fmt: skip
    assert [(row.bits, row.protect) for row in rows] == [(0, "none"), (2, "none")] and seen == [3, 3]
    whole = kv_quant.quantized_table(smollm2, trace, (2,), ("none",))
    np.testing.assert_array_equal(rows[1].nll, whole[1].nll)


def test_a_quantized_table_is_measured_once_for_every_session(smollm2: object, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    measure = kv_quant.quantized_table
    monkeypatch.setattr(kv_quant, "quantized_table", lambda *a, **kw: calls.append(1) or measure(*a, **kw))
    tables = []
    for _ in range(2):  # two visitors asking for the same caches of the same text
        at = open_page("kv")
        at.multiselect(key="kv_bits").set_value([3])
        submit(at, "Quantize the cache")
        tables.append(next(d.value for d in at.dataframe if "perplexity" in d.value.columns))
    assert len(calls) == 1 and tables[0].equals(tables[1])


def test_a_run_that_cannot_measure_anything_is_greyed_out_with_its_reason(smollm2: object) -> None:
    at = open_page("kv")
    at.select_slider(key="kv_tokens").set_value(128)
    at.select_slider(key="kv_budget").set_value(128).run(timeout=120)
    assert at.button(key="kv_evict").disabled  # 128 tokens through a cache of 128: nothing is ever evicted
    assert any("A cache of 128 tokens never fills on a text of 128 tokens" in c.value for c in at.caption)
    assert not at.button(key="kv_heads_run").disabled  # the per-head map's own sliders: 512 tokens, a cache of 64
