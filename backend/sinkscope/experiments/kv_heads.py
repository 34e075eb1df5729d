"""Which heads need the whole context: each head alone restricted to sinks + a window (DuoAttention's question).

DuoAttention (Xiao et al., ICLR 2025) learns a gate per key-value head that splits them into retrieval heads (the
full cache) and streaming heads (sinks + a recent window). Here the split is measured by ablation instead: for every
head, the change of the text's mean next-token loss when that head alone reads only the first SINKS tokens and its
last ``budget - SINKS`` (every other head dense). The heads of one layer run as lanes of one batch from that layer's
input, taken from a dense pass, so layer l costs L - l blocks per head and nothing before it is computed again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from sinkscope.core import attention, chunked, ranges
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import block_call, call_block, run_forward
from sinkscope.core.errors import ModelLoadError
from sinkscope.core.i18n import Message
from sinkscope.core.loss import LEVEL, TAILS, perplexity, resample_counts, resampled_means, token_nll
from sinkscope.core.models import LoadedModel, check_ids, require_loaded
from sinkscope.core.texts import builtin_text
from sinkscope.experiments.kv_evict import SINKS, check_cache
from sinkscope.experiments.streaming import band_mask, dense
from sinkscope.findings.words import LITTLE_WORSE, NEEDS_CONTEXT

TAIL_TOLERANCE = 1e-3  # nats: the final norm and LM head applied here must give the model's own loss
Progress = Callable[["HeadNeeds"], bool]  # the map so far (NaN where not yet measured) -> keep going?


@dataclass(frozen=True)
class HeadNeeds:
    """Per head, what restricting it alone to sinks + window costs the text's mean next-token loss."""

    budget: int  # cache size: SINKS first tokens and budget - SINKS recent ones
    dense_nll: np.ndarray  # (token - 1,)
    change: np.ndarray  # (layer, head): mean NLL ablated - dense, in nats; NaN: not measured (stopped)
    low: np.ndarray | None = None  # (layer, head): the change's LEVEL bootstrap interval over tokens (None: the
    high: np.ndarray | None = None  # change alone, as if it had no noise)

    def _interval(self) -> tuple[np.ndarray, np.ndarray]:
        found = (self.change, self.change) if self.low is None or self.high is None else (self.low, self.high)
        return tuple(np.nan_to_num(bound, nan=0.0) for bound in found)

    def needs_context(self) -> np.ndarray:
        """(layer, head) bool: the retrieval heads, whose restriction raises perplexity by over NEEDS_CONTEXT across
        the whole interval."""
        return self._interval()[0] > np.log1p(NEEDS_CONTEXT)

    def within_noise(self) -> np.ndarray:
        """(layer, head) bool: measured heads whose interval holds the threshold: this text cannot place them."""
        low, high = self._interval()
        return self.measured & (low <= np.log1p(NEEDS_CONTEXT)) & (high > np.log1p(NEEDS_CONTEXT))

    def streams(self) -> np.ndarray:
        """(layer, head) bool: measured heads that work with sinks + window across the whole interval."""
        return self.measured & ~self.needs_context() & ~self.within_noise()

    @property
    def measured(self) -> np.ndarray:
        """(layer, head) bool: the heads the run reached."""
        return ~np.isnan(self.change)

    def streaming_share(self) -> float:
        """The share of the measured heads this text places (outside the noise) that work with sinks + window (NaN:
        none placed)."""
        placed = self.measured & ~self.within_noise()
        return float(self.streams()[placed].mean()) if placed.any() else float("nan")


@dataclass
class Banded:
    """Attention where ``restricted[lane, layer, head]`` heads read only their band, every other head dense."""

    restricted: torch.Tensor  # (lane, layer, head) bool
    band: torch.Tensor  # (1, 1, query, key) bool: the keys a restricted head may read

    def attend(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask: object, scaling: float | None = None, softcap: float | None = None,
               s_aux: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:  # fmt: skip
        # query (lane, head, token, head_dim); key, value (lane, kv_head, token, head_dim) -> (lane, token, head, d)
        out = self._each_lane(query, key, value, mask, scaling, softcap, s_aux)
        restricted = self.restricted[:, module.layer_idx].to(out.device)  # (lane, head)
        if restricted.any():
            n_queries, n_keys = query.shape[2], key.shape[2]
            allowed = self.band & ~chunked.MaskFacts.of(mask, n_queries, n_keys, query.device).blocked
            banded = self._each_lane(query, key, value, allowed, scaling, softcap, s_aux)
            out = torch.where(restricted[:, None, :, None], banded, out)
        return out, None

    @staticmethod
    def _each_lane(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: object, scaling: float | None,
                   softcap: float | None, s_aux: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
        """The model's eager math, lane by lane (the chunk loop takes one sequence): (lane, token, head, d)."""
        return torch.cat([chunked.eager(q[None], k[None], v[None], mask, scaling, softcap, s_aux)[0]
                          for q, k, v in zip(query, key, value, strict=True)])  # fmt: skip


def _final_nll(loaded: LoadedModel, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(lane, position, d_model) h^L -> (lane, position) NLL of each position's ``targets``: the final norm, then the
    LM head."""
    model, norm = loaded.model, loaded.family.read_norms(loaded.model)[-1]
    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    rows = []
    for lane in hidden:  # one lane's (position, vocab) logits at a time
        logits = model.get_output_embeddings()(norm(lane) if norm is not None else lane)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        rows.append(torch.from_numpy(token_nll(logits, targets)))
    return torch.stack(rows)


def _run_blocks(loaded: LoadedModel, hidden: torch.Tensor, first: int, call: dict) -> torch.Tensor:
    """Blocks ``first`` .. L-1 on (lane, token, d_model) ``hidden``, with what the model passes every block."""
    for block in loaded.blocks[first:]:
        hidden = call_block(block, hidden, call)
    return hidden


def _dense_stream(loaded: LoadedModel, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """h^0 .. h^L of a dense pass (layer + 1, token, d_model), and the NLL of ids[1:] from the same pass' logits."""
    model = loaded.model
    recorder = loaded.recorder(reduce=False, residual=loaded.stream_buffer(len(ids)))
    logits = run_forward(loaded, ids, recorder, logits_from=0)  # (token, vocab)
    targets = torch.tensor(ids[1:], device=model.device)
    return torch.from_numpy(recorder.residual).to(model.device, model.dtype), torch.from_numpy(
        token_nll(logits[:-1], targets))  # fmt: skip


def head_needs(loaded: LoadedModel, ids: list[int], budget: int, progress: Progress | None = None) -> HeadNeeds:
    """Every head's loss change when it alone keeps sinks + window (a cache of ``budget`` tokens), layer by layer;
    ``progress`` may stop the run after any layer, keeping the layers measured."""
    check_ids(require_loaded(loaded), ids)
    loaded.check_length(len(ids))  # the one token limit a text meets, before any work
    loaded.require(Can.EVICT_KV)
    check_cache(len(ids), budget)
    info, model = loaded.info, loaded.model
    stream, model_nll = _dense_stream(loaded, ids)
    call = block_call(loaded, ids)
    targets = torch.tensor(ids[1:], device=model.device)
    band = band_mask(len(ids), SINKS, budget - SINKS).to(model.device)
    change, low, high = (np.full((info.n_layers, info.n_heads), np.nan) for _ in range(3))
    counts = resample_counts(len(ids) - 1)  # one set of resamples for every head: their intervals compare
    lanes = torch.arange(info.n_heads)  # lane i restricts head i
    reached = min(budget, len(ids) - 1)  # predictions from positions before the budget see every key anyway
    with torch.inference_mode():
        dense_nll = _final_nll(loaded, stream[-1:, :-1], targets)[0]
        if float((dense_nll - model_nll).abs().max()) > TAIL_TOLERANCE:  # a family scaling its logits its own way
            raise ModelLoadError("error.kv_heads_model", family=loaded.family.name)
        for layer in range(info.n_layers):
            restricted = torch.zeros(info.n_heads, info.n_layers, info.n_heads, dtype=torch.bool)
            restricted[lanes, layer, lanes] = True  # (lane, layer, head)
            hidden = stream[layer].expand(info.n_heads, -1, -1)  # (lane, token, d_model): the layer's dense input
            with attention.overriding(Banded(restricted, band).attend):
                final = _run_blocks(loaded, hidden, layer, call)[:, reached:-1]  # (lane, position, d)
                ablated = _final_nll(loaded, final, targets[reached:])
            per_token = torch.zeros(info.n_heads, len(dense_nll))  # (head, token - 1): 0 where every key is seen
            per_token[:, reached:] = ablated - dense_nll[reached:]
            change[layer] = per_token.mean(-1).numpy()  # (head,)
            low[layer], high[layer] = np.quantile(resampled_means(per_token.numpy(), counts), TAILS, axis=-1)
            if progress is not None and not progress(HeadNeeds(budget, dense_nll.numpy(), *copies(change, low, high))):
                break
    return HeadNeeds(budget, dense_nll.numpy(), change, low, high)


def copies(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(array.copy() for array in arrays)


CURVE_SHARES = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)  # shares of key-value heads kept whole along the policy curve
ORDERS = ("ranked", "random")  # whole heads chosen by the map's loss change, or at random (the baseline)


@dataclass(frozen=True)
class DuoPolicy:
    """DuoAttention's cache: retrieval key-value heads keep every token, streaming ones only sinks + window."""

    streaming: np.ndarray  # (layer, kv_head) bool
    nll: np.ndarray  # (token - 1,)
    cache_share: float  # the cache it holds at the end of the text, against the full cache
    dense_nll: np.ndarray | None = None  # (token - 1,): the dense cache on the same text (None: not run)

    @property
    def perplexity(self) -> float:
        return perplexity(self.nll)

    @property
    def dense_perplexity(self) -> float:
        return perplexity(self.dense_nll) if self.dense_nll is not None else float("nan")

    @property
    def retrieval_share(self) -> float:
        return float(1 - self.streaming.mean())


def kv_head_change(needs: HeadNeeds, n_kv_heads: int, bound: np.ndarray | None = None) -> np.ndarray:
    """(layer, kv_head): the largest loss change (or ``bound`` (layer, head), e.g. the interval's top) of the
    key-value head's query heads; +inf where not measured (the cache is per key-value head, so it can stream only
    if every query head reading it can)."""
    change = np.where(needs.measured, needs.change if bound is None else bound, np.inf)
    return change.reshape(change.shape[0], n_kv_heads, -1).max(-1)  # (layer, kv_head, group) -> (layer, kv_head)


def held_out_ids(loaded: LoadedModel, n_tokens: int) -> list[int]:
    """The ``n_tokens`` of Python's help after its first ``n_tokens``: a text to score DuoAttention's policy on that
    its per-head map was not built on (the map runs on the first ones, or on the visitor's text)."""
    return loaded.encode(builtin_text(), 2 * n_tokens, truncate=True, add_bos=False)[n_tokens:]


def whole_heads(needs: HeadNeeds, n_kv_heads: int, share: float, order: str = "ranked") -> np.ndarray:
    """(layer, kv_head) bool: the ``share`` of key-value heads kept whole, those whose restriction costs most
    ("ranked") or drawn with a fixed seed ("random")."""
    change = kv_head_change(needs, n_kv_heads)
    score = change if order == "ranked" else np.random.default_rng(0).random(change.shape)
    chosen = np.zeros(change.size, dtype=bool)
    chosen[np.argsort(-score, axis=None, kind="stable")[: round(share * change.size)]] = True
    return chosen.reshape(change.shape)


def duo_policy(
    loaded: LoadedModel, ids: list[int], needs: HeadNeeds, whole: np.ndarray | None = None,
    dense_nll: np.ndarray | None = None,
) -> DuoPolicy:  # fmt: skip
    """One pass over ``ids`` where every key-value head not kept ``whole`` (layer, kv_head) keeps only sinks +
    window, beside the dense cache on the same text (``dense_nll`` when the caller has it); by default the whole
    ones are those with a query head that may need the whole context (the top of its interval over the threshold),
    or one not measured."""
    check_ids(require_loaded(loaded), ids)
    loaded.check_length(len(ids))  # the one token limit a text meets, before any work
    loaded.require(Can.EVICT_KV)
    info = loaded.info
    group = info.n_heads // info.n_kv_heads
    if whole is None:
        whole = kv_head_change(needs, info.n_kv_heads, needs.high) > np.log1p(NEEDS_CONTEXT)
    streaming = ~whole
    restricted = torch.from_numpy(np.repeat(streaming, group, axis=1))[None]  # (lane=1, layer, head)
    band = band_mask(len(ids), SINKS, needs.budget - SINKS).to(loaded.model.device)
    with attention.overriding(Banded(restricted, band).attend):
        nll = dense(loaded, ids)
    held = np.where(streaming, min(needs.budget, len(ids)), len(ids))  # (layer, kv_head): tokens each one holds
    dense_nll = dense(loaded, ids) if dense_nll is None else dense_nll
    return DuoPolicy(streaming, nll, float(held.sum() / (len(ids) * streaming.size)), dense_nll)


def policy_curve(
    loaded: LoadedModel, ids: list[int], needs: HeadNeeds, shares: tuple[float, ...] = CURVE_SHARES
) -> dict[str, list[DuoPolicy]]:
    """Per order: the policy keeping each share of key-value heads whole, one pass each over ``ids``."""
    for share in shares:
        ranges.check("share", share)
    n_kv, dense_nll = loaded.info.n_kv_heads, dense(loaded, ids)
    return {order: [duo_policy(loaded, ids, needs, whole_heads(needs, n_kv, share, order), dense_nll)
                    for share in shares] for order in ORDERS}  # fmt: skip


def said(needs: HeadNeeds, policy: DuoPolicy | None) -> Message | None:
    """How many heads work with sinks + window, and what DuoAttention's policy built from them costs (whether the
    heads' small costs add up to a perplexity LITTLE_WORSE than dense)."""
    measured = int(needs.measured.sum())
    if not measured:
        return None
    noise = int(needs.within_noise().sum())
    placed = Message.of("kv.heads_placed", noise=noise, measured=measured, rise=round(100 * NEEDS_CONTEXT),
                        level=round(100 * LEVEL), placed=measured - noise,
                        share=round(100 * needs.streaming_share()))  # fmt: skip
    params = dict(streaming=int(needs.streams().sum()), measured=measured, budget=needs.budget,
                  rise=round(100 * NEEDS_CONTEXT), dense=round(perplexity(needs.dense_nll), 2),
                  placed_said=placed)  # fmt: skip
    if policy is None:
        return Message.of("kv.heads_said", **params)
    adds_up = policy.perplexity >= LITTLE_WORSE * policy.dense_perplexity
    return Message.of("kv.heads_policy_said" if adds_up else "kv.heads_policy_little", **params,
                      policy=round(policy.perplexity, 2), cache=round(100 * policy.cache_share),
                      policy_dense=round(policy.dense_perplexity, 2), tokens=len(policy.nll) + 1)  # fmt: skip
