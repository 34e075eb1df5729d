"""Eviction policies at one budget (issue 41, item 2): the window policies against transformers-free band masks,
H2O's evictions against a hand simulation from eager queries and keys, and SmolLM2's H2O keeping its sink."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
import torch
from sinkscope.core.errors import InputError, ModelLoadError
from sinkscope.core.texts import builtin_text
from sinkscope.experiments import kv_evict
from sinkscope.experiments.streaming import band_mask, dense
from sinkscope.serving.runs import RunQueue

from tests.tiny import N_TOKENS, build, loaded_tiny, slow_loaded

BUDGET = 12


@pytest.fixture(scope="module")
def ids() -> list[int]:
    return np.random.default_rng(13).integers(3, 96, size=N_TOKENS).tolist()


@pytest.fixture(scope="module")
def llama(ids: list[int]) -> kv_evict.Eviction:
    return kv_evict.evict(loaded_tiny("llama"), ids, BUDGET)


def test_the_window_policies_equal_a_dense_pass_under_their_band(llama: kv_evict.Eviction, ids: list[int]) -> None:
    loaded = loaded_tiny("llama")
    for lane, sinks in ((0, 0), (1, kv_evict.SINKS)):  # window; sinks + window (text positions)
        expected = dense(loaded, ids, band_mask(len(ids), sinks, BUDGET - sinks))
        np.testing.assert_allclose(llama.nll[lane], expected[: llama.nll.shape[1]], rtol=1e-4, atol=1e-5)


def layer0_queries_and_keys(ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """Layer 0's rotated queries (head, token, d) and keys (kv_head, token, d), from transformers' eager module:
    what it is given does not depend on any eviction."""
    model, seen = build("llama", "eager"), {}
    attn = model.model.layers[0].self_attn
    hook = attn.register_forward_pre_hook(lambda _m, args, kwargs: seen.update(kwargs, x=(args or [None])[0]),
                                          with_kwargs=True)  # fmt: skip
    with torch.no_grad():
        model(torch.tensor([ids]))
        hook.remove()
        x = seen["x"] if seen["x"] is not None else seen["hidden_states"]
        shape = (1, len(ids), -1, attn.head_dim)
        q, k = attn.q_proj(x).view(shape).transpose(1, 2), attn.k_proj(x).view(shape).transpose(1, 2)
        q, k = sys.modules[type(attn).__module__].apply_rotary_pos_emb(q, k, *seen["position_embeddings"])
    return q[0] * attn.scaling, k[0], attn.num_key_value_groups


def simulated_h2o(q: torch.Tensor, k: torch.Tensor, group: int, steps: int, sinks: int) -> list[list[int]]:
    """H2O by hand, per kv head: before step t attends, over budget, drop the coldest token that is neither recent
    nor protected; then add the step's attention (summed over the head's queries) to each kept token's heat."""
    recent = int(BUDGET * kv_evict.RECENT_SHARE)
    dropped = []
    for h in range(k.shape[0]):
        kept, heat, mine = [], np.zeros(steps), []
        for t in range(steps):
            kept.append(t)
            gone = -1
            if len(kept) > BUDGET:
                may = [j for j in kept if sinks <= j <= t - recent]
                gone = min(may, key=lambda j: (heat[j], j))
                kept.remove(gone)
            mine.append(gone)
            scores = q[h * group : (h + 1) * group, t] @ k[h, kept].T  # (group, kept)
            heat[kept] += torch.softmax(scores.double(), dim=-1).sum(0).numpy()
        dropped.append(mine)
    return dropped  # (kv_head, step)


def test_h2o_drops_what_a_hand_simulation_from_eager_attention_drops(llama: kv_evict.Eviction, ids: list[int]) -> None:
    q, k, group = layer0_queries_and_keys(ids)
    for lane, sinks in ((2, 0), (3, kv_evict.SINKS)):  # h2o; h2o with the first four tokens kept
        expected = simulated_h2o(q, k, group, llama.evicted.shape[0], sinks)
        assert llama.evicted[:, lane, 0].T.tolist() == expected
    assert (llama.kept[3, :, :, : kv_evict.SINKS]).all()  # the sinks lane never drops them
    assert llama.kept.sum(-1).max() <= BUDGET


def test_evictions_are_refused_where_they_would_be_wrong(ids: list[int]) -> None:
    with pytest.raises(ModelLoadError, match="slow path"):
        kv_evict.evict(slow_loaded("bloom"), ids, BUDGET)
    with pytest.raises(ModelLoadError, match="sliding-window"):
        kv_evict.evict(loaded_tiny("gemma3"), ids, BUDGET)
    with pytest.raises(InputError, match="more than 4"):
        kv_evict.evict(loaded_tiny("llama"), ids, 4)


def test_on_smollm2_h2o_keeps_the_first_token_without_being_told(smollm2: object) -> None:
    ids = smollm2.encode(builtin_text(), 160, truncate=True)
    found = kv_evict.evict(smollm2, ids, 32)
    window, sinks_window, h2o, _ = range(4)
    assert found.first_kept[window] == 0 and found.first_kept[sinks_window] == 1
    assert found.first_kept[h2o] > 0.9  # heavy hitters: the sink is the heaviest
    assert found.perplexity(sinks_window) < found.perplexity(window)


def test_an_eviction_that_lets_a_waiting_visitor_in_mid_run_never_blocks_that_visitors_own() -> None:
    random_ids = np.random.default_rng(3).integers(3, 96, size=16).tolist()
    """Both hold the one-thread setting: the first pauses inside it while the second evicts to its end (a lock held
    across the pause deadlocked the KV lab's eviction against the warm start's); the count comes back after both."""
    loaded, queue, order = loaded_tiny("llama"), RunQueue(), []
    before, started = torch.get_num_threads(), threading.Event()
    torch.set_num_threads(2)

    def visitor(name: str) -> None:
        def step(so_far: np.ndarray, total: int) -> bool:
            started.set()
            order.append(name)
            queue.let_others_in()
            return True

        with queue.turn():
            kv_evict.evict(loaded, random_ids[:16], 8, ("window", "h2o"), progress=step)

    try:
        first = threading.Thread(target=visitor, args=("first",))
        first.start()
        started.wait()
        second = threading.Thread(target=visitor, args=("second",))
        second.start()
        for thread in (first, second):
            thread.join(timeout=60)
        assert not first.is_alive() and not second.is_alive()
        assert order.index("second") < len(order) - order[::-1].index("first") - 1  # the second ran mid-first
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
