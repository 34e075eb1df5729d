"""Where attention goes and where a sink is made (issue 40): key_sink, the blocks' writes, the QK attribution and the
removal of one write, each against transformers' own eager forward on tiny random models, then on SmolLM2."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from sinkscope.core.capture import analyze_ids
from sinkscope.core.errors import InputError, ModelLoadError
from sinkscope.core.names import DEFAULT_EPS
from sinkscope.experiments import elsewhere, interventions, qk, writes
from sinkscope.findings import origins, words

from tests.helpers import english, synthetic
from tests.tiny import MATRIX, N_TOKENS, build, eager_run, loaded_tiny, slow_loaded


@pytest.fixture(scope="module")
def ids() -> list[int]:
    return np.random.default_rng(5).integers(3, 96, size=N_TOKENS).tolist()


def column_means(maps: np.ndarray) -> np.ndarray:
    """key_sink by its definition, one key at a time: the mean over heads of the mean over t > j of A[t, j]."""
    n = maps.shape[-1]
    return np.array([maps[:, j + 1 :, j].mean(-1).mean() if j < n - 1 else np.nan for j in range(n)])


@pytest.mark.parametrize("name", list(MATRIX))
def test_key_sink_equals_the_columns_of_eager_attention(name: str, ids: list[int]) -> None:
    reference, _ = eager_run(name, ids)
    trace = analyze_ids(loaded_tiny(name), ids)
    expected = np.stack([column_means(maps[0].numpy()) for maps in reference.attentions])  # (layer, token)
    np.testing.assert_allclose(trace.key_sink, expected, atol=1e-6)
    np.testing.assert_allclose(trace.key_sink[:, 0], trace.heads["sink"].mean(1), atol=1e-6)  # column 0 is `sink`


@pytest.mark.parametrize("name", ["bloom", "falcon"])
def test_key_sink_on_the_slow_path_equals_the_columns_of_its_eager_weights(name: str, ids: list[int]) -> None:
    loaded = slow_loaded(name)
    with torch.inference_mode():
        reference = loaded.model(torch.tensor([ids]), output_attentions=True, use_cache=False)
    expected = np.stack([column_means(maps[0].numpy()) for maps in reference.attentions])
    np.testing.assert_allclose(analyze_ids(loaded, ids).key_sink, expected, atol=1e-6)


@pytest.mark.parametrize("name", ["llama", "gemma3", "gpt2", "gpt_neox", "olmo2", "opt", "opt-350m"])
def test_the_writes_rebuild_the_first_tokens_states_or_are_not_shown(name: str, ids: list[int]) -> None:
    """Embedding plus every write so far gives transformers' own hidden state at position 0; a post-norm block's
    stream is no such sum, and its writes are not shown."""
    reference, _ = eager_run(name, ids)
    trace = analyze_ids(loaded_tiny(name), ids)
    if name == "opt-350m":
        assert trace.writes is None
        return
    added = trace.writes.first.sum(0).astype(np.float64)  # (block, d_model): what each block adds at position 0
    states = [h[0, 0].numpy() for h in reference.hidden_states[:-1]]  # h^0 .. h^(L-1): the last is after the norm
    rebuilt = states[0] + np.cumsum(added, axis=0)[:-1]
    np.testing.assert_allclose(rebuilt, np.stack(states[1:]), rtol=1e-4, atol=1e-5)


def test_the_mlp_write_per_token_is_what_the_mlp_returns(ids: list[int]) -> None:
    loaded, outputs = loaded_tiny("llama"), []
    hooks = [block.mlp.register_forward_hook(lambda _m, _a, out: outputs.append(out[0].clone())) for block in
             loaded.blocks]  # fmt: skip
    trace = analyze_ids(loaded, ids)
    for hook in hooks:
        hook.remove()
    expected = torch.stack(outputs)  # (block, token, d_model)
    np.testing.assert_allclose(trace.writes.mlp_norm, expected.norm(dim=-1).numpy(), rtol=1e-5)
    after = torch.tensor(trace.residual[1:, 0])  # h^(b+1)[0]: (block, d_model)
    cos = torch.nn.functional.cosine_similarity(expected, after[:, None], dim=-1)
    np.testing.assert_allclose(trace.writes.mlp_cos_first, cos.numpy(), atol=1e-5)


def with_key_bias(model: torch.nn.Module) -> torch.nn.Module:
    """Qwen2's key bias set to sizes a trained model has (a random model starts it at 0)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            module.bias.data = torch.linspace(-1.0, 1.0, module.bias.numel())
    return model


def eager_scores(name: str, ids: list[int], layer: int, head: int) -> torch.Tensor:
    """s[t, 0] of one head, built by hand from what transformers' eager attention module is given: its projections,
    its q/k norms and its family's own rotary function."""
    model, seen = with_key_bias(build(name, "eager")), {}
    attn = model.model.layers[layer].self_attn
    hook = attn.register_forward_pre_hook(lambda _m, args, kwargs: seen.update(kwargs, x=(args or [None])[0]),
                                          with_kwargs=True)  # fmt: skip
    with torch.no_grad():
        model(torch.tensor([ids]))
        hook.remove()
        x = seen["x"] if seen["x"] is not None else seen["hidden_states"]  # (1, token, d_model), normed
        shape = (1, len(ids), -1, attn.head_dim)
        q, k = attn.q_proj(x).view(shape), attn.k_proj(x).view(shape)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        q, k = rotate(q.transpose(1, 2), k.transpose(1, 2), *seen["position_embeddings"])  # (1, head, token, d)
        return attn.scaling * q[0, head] @ k[0, head // attn.num_key_value_groups, 0]  # (token,)


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma3"])
def test_the_qk_terms_sum_to_the_score_of_an_eager_forward(name: str, ids: list[int]) -> None:
    """One term per component (the embedding, each earlier write, the bias; Qwen2's keys have one, Gemma-3 normalizes
    its keys) adds up to the score transformers' eager attention computes, to 1e-4."""
    layer, head, first, last = 2, 3, 5, 30
    loaded = loaded_tiny(name)
    with_key_bias(loaded.model)
    terms = qk.qk_attribution(loaded, ids, layer, head, (first, last))
    expected = float(eager_scores(name, ids, layer, head)[first : last + 1].mean())
    assert terms.parts[0] == ("embedding", -1) and terms.parts[-1] == ("bias", -1) and len(terms.parts) == 2 * layer + 2
    assert terms.terms.sum() == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert terms.score == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert (terms.terms[-1] != 0) == (name == "qwen2")  # only Qwen2's key projection has a bias


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_the_margin_split_sums_to_the_log_odds_of_eager_attention_on_key_0(name: str, ids: list[int]) -> None:
    """The margin, key 0's score over the log-sum-exp of the others', is the log-odds of the weight transformers'
    eager attention gives key 0: ln(p / (1 - p)) for each query, averaged; its split adds up to it."""
    layer, head, first, last = 2, 3, 5, 30
    loaded = loaded_tiny(name)
    terms = qk.qk_attribution(loaded, ids, layer, head, (first, last))
    output, _ = eager_run(name, ids)
    p = output.attentions[layer][0, head, first : last + 1, 0].double()  # (queries,): eager's weight on key 0
    expected = float(torch.log(p / (1 - p)).mean())
    assert terms.margin == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert terms.margin_terms.sum() == pytest.approx(terms.margin, rel=1e-4, abs=1e-4)
    assert terms.first_weight == pytest.approx(float(p.mean()), abs=1e-5)


@pytest.mark.parametrize("name", ["llama", "gemma3", "gemma2", "gpt_oss"])
@pytest.mark.parametrize("layer", [1, 2])
def test_the_weight_on_key_0_is_eager_attentions_under_sliding_windows_soft_caps_and_learned_sinks(
    name: str, layer: int, ids: list[int]
) -> None:
    """Gemma-3's and Gemma-2's sliding layers, Gemma-2's soft-capping, gpt-oss's learned sink logit: the weight the
    QK page reports is the one transformers' eager attention gives key 0."""
    terms = qk.qk_attribution(loaded_tiny(name), ids, layer, 3, (5, 30))
    output, _ = eager_run(name, ids)
    expected = float(output.attentions[layer][0, 3, 5:31, 0].double().mean())
    assert terms.first_weight == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_the_split_s_prediction_stands_beside_a_real_run_without_the_write(smollm2: object) -> None:
    trace = english(smollm2)
    built = writes.first_writes(trace)
    sink = np.nan_to_num(trace.heads["sink"])
    layer, head = (int(i) for i in np.unravel_index(np.argmax(sink), sink.shape))
    removed = (built.builder.part, built.builder.block)
    check = qk.linear_check(smollm2, trace.token_ids, layer, head, removed)
    real = writes.remove_write(smollm2, trace.token_ids, built.builder.block, built.builder.part)
    assert check.ablated.first_weight == pytest.approx(float(real.changed.heads["sink"][layer, head]), abs=1e-3)
    assert check.predicted_margin == pytest.approx(check.intact.margin - check.intact.term_of(removed))
    assert check.holds == (abs(check.predicted_margin - check.ablated.margin) <= words.SPLIT_HOLDS)
    assert check.said().text("en").startswith("With one write removed (remove block")
    given = qk.linear_check(smollm2, trace.token_ids, layer, head, removed, intact=check.intact)
    assert given.ablated.margin == check.ablated.margin  # the page hands over the split it drew: one pass less
    assert given.predicted_margin == check.predicted_margin
    with pytest.raises(InputError, match="not before layer"):
        qk.linear_check(smollm2, trace.token_ids, 2, 0, ("mlp", 5))


@pytest.mark.parametrize(("name", "reason"), [("olmo2", "post-norm"), ("gpt2", "one projection")])
def test_the_qk_split_says_why_a_family_has_none(name: str, reason: str, ids: list[int]) -> None:
    with pytest.raises(InputError, match=reason):
        qk.qk_attribution(loaded_tiny(name), ids, 1, 0)


def test_removing_one_write_equals_a_hand_hooked_forward(ids: list[int]) -> None:
    """The MLP write of block 1 removed at position 0 only: loss and sink scores as transformers' eager forward
    gives them with that module's output edited by hand."""
    removed = writes.remove_write(loaded_tiny("llama"), ids, 1, "mlp")
    model = build("llama", "eager")

    def drop_first(_module: object, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        edited = output.clone()
        edited[:, 0] = 0
        return edited

    model.model.layers[1].mlp.register_forward_hook(drop_first)
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    nll = torch.nn.functional.cross_entropy(out.logits[0, :-1], torch.tensor(ids[1:]), reduction="none")
    np.testing.assert_allclose(removed.changed.nll, nll.numpy(), rtol=1e-4, atol=1e-5)
    sink = np.stack([maps[0, :, 1:, 0].mean(-1).numpy() for maps in out.attentions])  # (layer, head)
    np.testing.assert_allclose(removed.changed.heads["sink"], sink, atol=1e-5)
    assert removed.loss_change == pytest.approx(removed.changed.loss - removed.intact.loss)
    assert removed.sink_after(removed.changed) == pytest.approx((sink[2:] > DEFAULT_EPS).mean() * 100)


def eager_nll_with(model: torch.nn.Module, ids: list[int], edit: object) -> np.ndarray:
    """NLL of ids[1:] from transformers' eager forward with block 1's MLP output edited by ``edit(output)``."""
    hook = model.model.layers[1].mlp.register_forward_hook(lambda _m, _a, output: edit(output.clone()))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    hook.remove()
    return torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").numpy()


def test_the_two_controls_equal_hand_built_ablations(ids: list[int]) -> None:
    """Block 1's MLP write at position 0 replaced by its mean over texts starting with other tokens (each run alone
    by hand: position 0 sees only itself), and only one channel of it zeroed."""
    model, firsts = build("llama", "eager"), [5, 9, 17, 33]
    seen = []
    hook = model.model.layers[1].mlp.register_forward_hook(lambda _m, _a, output: seen.append(output[0, 0].clone()))
    with torch.no_grad():
        for token in firsts:
            model(torch.tensor([[token, 7, 8]]))  # later tokens change nothing at position 0
    hook.remove()
    by_hand = torch.stack(seen).mean(0)
    loaded = loaded_tiny("llama")
    mean = writes.mean_first_write(loaded, 1, "mlp", firsts)
    np.testing.assert_allclose(mean, by_hand.numpy(), rtol=1e-4, atol=1e-6)

    def put_mean(output: torch.Tensor) -> torch.Tensor:
        output[:, 0] = by_hand
        return output

    def zero_channel(output: torch.Tensor) -> torch.Tensor:
        output[:, 0, 3] = 0
        return output

    change = writes.RemoveWrite(1, "mlp", "mean", mean=tuple(map(float, mean)))
    np.testing.assert_allclose(interventions.outcome(loaded, ids, change).nll, eager_nll_with(model, ids, put_mean),
                               rtol=1e-4, atol=1e-5)  # fmt: skip
    change = writes.RemoveWrite(1, "mlp", "channel", channel=3)
    np.testing.assert_allclose(interventions.outcome(loaded, ids, change).nll,
                               eager_nll_with(model, ids, zero_channel), rtol=1e-4, atol=1e-5)  # fmt: skip
    with pytest.raises(InputError, match="needs its own setting"):
        writes.RemoveWrite(1, "mlp", "channel")
    with pytest.raises(InputError, match="none was given"):
        writes.mean_first_write(loaded, 1, "mlp", [])


def test_on_smollm2_the_three_removals_tell_no_sink_from_out_of_range(smollm2: object) -> None:
    trace = english(smollm2)
    built = writes.first_writes(trace)
    found = writes.controls(smollm2, trace.token_ids, built.builder.block, built.builder.part, built.channel)
    assert [c.how for c in found] == list(writes.HOWS)
    assert 0 < len(writes.other_first_tokens(smollm2, trace.token_ids)) <= writes.OTHER_FIRSTS
    assert trace.token_ids[0] not in writes.other_first_tokens(smollm2, trace.token_ids)


def test_writes_are_refused_with_a_reason_where_a_family_has_none(ids: list[int]) -> None:
    with pytest.raises(ModelLoadError, match="slow path"):
        writes.remove_write(slow_loaded("bloom"), ids, 1, "mlp")
    with pytest.raises(InputError, match="part"):
        writes.RemoveWrite(1, "norm")


def test_secondary_sinks_are_runs_of_states_aligned_with_the_first_within_raised_layers() -> None:
    """Four blocks; the first token is raised in h^1..h^3. Token 2 follows it there (3 layers, past the bounds
    rescaled to 4 layers: more than 0.4 and fewer than 2.5), token 1 only in h^2; token 3 in h^4, where the first
    token is no longer raised."""
    residual = np.tile(np.eye(4)[[1, 2, 3, 3]], (5, 1, 1)).astype(np.float32)  # (layer + 1, token, d_model)
    residual[1:4, 0] = [10, 0, 0, 0]
    residual[1:4, 2] = [1, 0.1, 0, 0]
    residual[2, 1] = [1, 0, 0, 0]
    residual[4, 3] = residual[4, 0]
    key_sink = np.full((4, 4), 0.1)
    key_sink[2, 1] = 0.4
    found = origins.secondary_sinks(synthetic(residual, key_sink))
    assert found.raised == ((1, 3),)
    assert found.bounds == pytest.approx((0.4, 2.5))
    assert [(s.position, s.first, s.last) for s in found.sinks] == [(2, 1, 3), (1, 2, 2)]
    assert [s.position for s in found.within] == [1] and found.within[0].key_sink == pytest.approx(0.4)
    assert "1 secondary sink " in found.said().text("en")


def test_receivers_name_the_keys_that_take_most_besides_the_first() -> None:
    key_sink = np.array([[0.9, 0.05, 0.3, np.nan], [0.7, 0.2, 0.1, np.nan]])
    trace = synthetic(np.ones((3, 4, 2), dtype=np.float32), key_sink)
    assert [(r.layer, r.position) for r in origins.receivers(trace, 2)] == [(0, 2), (1, 1)]
    assert [(r.layer, r.position) for r in origins.receivers(trace, 1, skip_first=False)] == [(0, 0)]
    said = origins.receivers(trace, 1)[0].said().text("fr")
    assert said == "'t2' en position 2 reçoit 0,30 de l'attention de la couche 0."


def test_on_smollm2_the_first_tokens_sink_is_built_by_one_write_whose_removal_undoes_it(smollm2: object) -> None:
    """The write that puts the most into the first token's largest massive activation: without it at position 0, the
    later layers' sink rate falls and the loss rises; the strongest sink head's score on key 0 splits exactly, its
    largest term that same write."""
    trace = english(smollm2)
    built = writes.first_writes(trace)
    part, block = built.builder.part, built.builder.block
    assert built.in_channel[0 if part == "attention" else 1, block] > 0.5 * built.peak
    removed = writes.remove_write(smollm2, trace.token_ids, block, part)
    assert removed.sink_after(removed.changed) < 0.5 * removed.sink_after(removed.intact)
    assert removed.loss_change > 0
    sink = np.nan_to_num(trace.heads["sink"])
    layer, head = np.unravel_index(np.argmax(sink), sink.shape)
    terms = qk.qk_attribution(smollm2, trace.token_ids, int(layer), int(head))
    assert terms.terms.sum() == pytest.approx(terms.score, rel=1e-4)
    assert terms.largest(1)[0][0] == (part, block)


def test_on_smollm2_the_english_example_has_secondary_sinks_that_receive_attention(smollm2: object) -> None:
    trace = english(smollm2)
    found = origins.secondary_sinks(trace)
    assert found.within
    sink = found.within[0]
    assert sink.key_sink > np.nanmedian(trace.key_sink[:, 1:])  # a sink-like state takes more than a typical key
    assert abs(sink.mlp_cos) > origins.SINK_LIKE / 2  # the write that made it points along the first token's state


@pytest.mark.parametrize("mode", ["state", "scale"])
def test_a_sink_made_elsewhere_equals_a_hand_edited_eager_forward(mode: str, ids: list[int]) -> None:
    """Token 9 given the first token's state (or its own, ten times) at h^2: its key_sink as transformers' eager
    forward gives it with block 1's output edited by hand."""
    loaded = loaded_tiny("llama")
    made = elsewhere.make_sink(loaded, analyze_ids(loaded, ids), 9, 2, mode)
    model = build("llama", "eager")

    def edit(_module: object, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        hidden = (output[0] if isinstance(output, tuple) else output).clone()  # (1, token, d_model)
        hidden[:, 9] = hidden[:, 0] if mode == "state" else hidden[:, 9] * elsewhere.SCALE
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    model.model.layers[1].register_forward_hook(edit)
    with torch.no_grad():
        maps = model(torch.tensor([ids]), output_attentions=True).attentions
    expected = np.stack([column_means(layer[0].numpy()) for layer in maps])  # (layer, token)
    np.testing.assert_allclose(made.after, expected[:, 9], atol=1e-6)
    np.testing.assert_allclose(made.first_after, expected[:, 0], atol=1e-6)
    np.testing.assert_allclose(made.before[:2], made.after[:2])  # the layers before the change read the same states


def test_a_sink_elsewhere_is_refused_at_the_first_token_and_without_massive_channels(ids: list[int]) -> None:
    loaded = loaded_tiny("llama")
    trace = analyze_ids(loaded, ids)
    with pytest.raises(InputError, match="already where the sink is"):
        elsewhere.make_sink(loaded, trace, 0, 1, "state")
    with pytest.raises(InputError, match="no massive activation"):
        elsewhere.make_sink(loaded, trace, 3, 1, "massive")  # a random model has none


def test_on_smollm2_the_first_tokens_state_makes_a_sink_where_it_is_put(smollm2: object) -> None:
    trace = english(smollm2)
    made = elsewhere.make_sink(smollm2, trace, 30, 12, "state")
    assert made.mean_from_layer(made.after) > 5 * made.mean_from_layer(made.before)
    assert made.mean_from_layer(made.first_after) < made.mean_from_layer(made.first_before)
