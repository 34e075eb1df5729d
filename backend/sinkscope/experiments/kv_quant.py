"""A quantized KV cache, with and without its sinks in full precision (KIVI, IntactKV, KVSink).

Keys and values are fake-quantized as KIVI stores them: asymmetric uniform integers of ``bits`` bits, keys per
channel over groups of GROUP consecutive tokens, values per token over groups of GROUP channels. A protected token
keeps its key and value in full precision and is left out of its group's range (a sink's huge key would otherwise
stretch the range of every token beside it).

The cache is causal, as KIVI's Algorithm 1 decodes: a query reads a key quantized only once the key's residual block
of RESIDUAL tokens is full (keys are quantized a whole group at a time, so no query reads a range set by a later key),
and a value quantized only once RESIDUAL newer tokens follow it; everything newer is read in full precision. One
teacher-forced pass scores every token: each (query, key) pair reads one of four copies of the cache (key and value,
each full or quantized), chosen by the mask. ``residual=None`` is the old scheme, kept as a labelled bound: every
token quantized at once over its whole group, later keys included (non-causal, no residual: pessimistic).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from sinkscope.core import attention, chunked, ranges
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import Trace, analyze_ids, require_trace_of
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message, times
from sinkscope.core.loss import (
    LEVEL,
    Interval,
    interval_of,
    mean_difference,
    perplexity,
    resample_counts,
    resampled_means,
)
from sinkscope.core.models import LoadedModel, check_ids, require_loaded
from sinkscope.core.names import DEFAULT_EPS, PROTECT_KEYS
from sinkscope.experiments.kv_settings import BITS, GROUP, PROTECTIONS, RESIDUAL, RESIDUALS  # noqa: F401  (re-exported)
from sinkscope.experiments.streaming import dense
from sinkscope.findings.origins import secondary_sinks

FIRST_KEPT = 4  # "first4": StreamingLLM's four initial tokens
FEWEST_QUERIES = 8  # a key's key_sink says it is a sink only when at least this many queries come after it
Progress = Callable[[list["KVRow"], int], bool]  # (rows so far, rows asked) -> keep going?


def _ranges(x: torch.Tensor, keep: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) of ``x`` over ``dim``, leaving out the entries where ``keep`` (broadcast like x) is True."""
    low = torch.where(keep, torch.inf, x).amin(dim, keepdim=True)
    high = torch.where(keep, -torch.inf, x).amax(dim, keepdim=True)
    empty = ~torch.isfinite(low)  # a group of protected entries only: nothing to quantize
    return torch.where(empty, 0.0, low), torch.where(empty, 0.0, high)


def _rounded(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor, bits: int) -> torch.Tensor:
    """x on the 2^bits levels from low to high (asymmetric uniform quantization, then back to floats)."""
    step = (high - low) / (2**bits - 1)
    safe = torch.where(step > 0, step, 1.0)
    return torch.where(step > 0, torch.round((x - low) / safe) * safe + low, low)


def quantize_keys(key: torch.Tensor, bits: int, kept: torch.Tensor, group: int = GROUP) -> torch.Tensor:
    """Keys (..., token, head_dim), each channel quantized over groups of ``group`` tokens; ``kept`` (token,) bool
    marks the tokens left in full precision."""
    n_tokens = key.shape[-2]
    pad = -n_tokens % group
    x = torch.nn.functional.pad(key.float(), (0, 0, 0, pad))  # (..., token + pad, head_dim)
    keep = torch.nn.functional.pad(kept, (0, pad), value=True)[:, None]  # (token + pad, 1): padding is no token
    grouped = x.unflatten(-2, (-1, group))  # (..., n_groups, group, head_dim)
    keep = keep.unflatten(0, (-1, group))  # (n_groups, group, 1)
    low, high = _ranges(grouped, keep, dim=-2)
    out = torch.where(keep, grouped, _rounded(grouped, low, high, bits)).flatten(-3, -2)[..., :n_tokens, :]
    return out.to(key.dtype)


def quantize_values(value: torch.Tensor, bits: int, kept: torch.Tensor, group: int = GROUP) -> torch.Tensor:
    """Values (..., token, head_dim), each token quantized over groups of ``group`` channels; ``kept`` as above."""
    head_dim = value.shape[-1]
    pad = -head_dim % group
    x = torch.nn.functional.pad(value.float(), (0, pad))  # (..., token, head_dim + pad)
    grouped = x.unflatten(-1, (-1, group))  # (..., token, n_groups, group)
    channel_pad = torch.arange(head_dim + pad, device=value.device).unflatten(0, (-1, group)) >= head_dim
    low, high = _ranges(grouped, channel_pad, dim=-1)  # padding channels do not stretch a range
    out = _rounded(grouped, low, high, bits).flatten(-2)[..., :head_dim]
    return torch.where(kept[:, None], value.float(), out).to(value.dtype)


def detected_sinks(trace: Trace) -> tuple[int, ...]:
    """The tokens a "sinks" protection keeps: those carrying a massive activation, those some layer gives more than
    eps of its attention (key_sink, over at least FEWEST_QUERIES later queries), and the secondary sinks."""
    massive = {token for _, token, _, _ in trace.massive}
    counted = trace.key_sink[:, : max(trace.n_tokens - FEWEST_QUERIES, 0)]  # (layer, key): keys enough queries follow
    receiving = set(np.flatnonzero(np.nanmax(np.nan_to_num(counted, nan=0.0), axis=0) > DEFAULT_EPS).tolist())
    secondary = {sink.position for sink in secondary_sinks(trace).within}
    return tuple(sorted(massive | receiving | secondary))


def protected(protect: str, n_tokens: int, sinks: tuple[int, ...]) -> torch.Tensor:
    """(token,) bool: the tokens ``protect`` keeps in full precision."""
    ranges.check_choice("protect", protect, PROTECTIONS)
    kept = torch.zeros(n_tokens, dtype=torch.bool)
    if protect == "first4":
        kept[:FIRST_KEPT] = True
    elif protect == "sinks":
        kept[[s for s in sinks if s < n_tokens]] = True
    return kept


def _choices(name: str, given: object, allowed: tuple) -> tuple:
    """``given`` (a list or tuple of some of ``allowed``) as a tuple; an InputError naming ``name`` otherwise."""
    if not isinstance(given, list | tuple):  # a lone 2 or "sinks" is not a list of them
        raise InputError("error.choices_list", name=name, value=ranges.shown(given),
                         choices=", ".join(map(str, allowed)), example=allowed[0])  # fmt: skip
    for value in given:
        ranges.check_choice(name, value, allowed)
    return tuple(given)


def _kept_per_token(kept: object, n_tokens: int) -> torch.Tensor:
    """``kept`` as the (token,) bool tensor it must be: one True (full precision) or False per token of the text."""
    try:
        found = torch.as_tensor(np.asarray(kept) if not isinstance(kept, torch.Tensor) else kept)
    except (TypeError, ValueError, RuntimeError):  # strings, ragged lists: nothing torch can hold
        found = None
    if found is None or found.dtype != torch.bool or tuple(found.shape) != (n_tokens,):
        raise InputError("error.kv_kept", n=n_tokens, value=ranges.shown(kept))
    return found


def read_quantized(n_tokens: int, group: int, residual: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(query, key) bool for keys and for values: where a query reads that token quantized (Algorithm 1 of KIVI).

    With ``q + 1`` tokens in the cache, keys before the last ``(q + 1) % residual`` are quantized (their block is
    full; with residual 0, once their group is), values older than the newest ``residual``. None: everything.
    """
    if residual is None:
        every = torch.ones(n_tokens, n_tokens, dtype=torch.bool)
        return every, every
    cached = torch.arange(1, n_tokens + 1)[:, None]  # (query, 1): tokens in the cache as the query reads it
    key = torch.arange(n_tokens)[None, :]  # (1, key)
    flushed = cached - cached % (residual or group)  # the tokens of full blocks (groups, with no residual)
    return key < flushed, key < cached - residual


def check_residual(residual: int | None, group: int = GROUP) -> None:
    if residual is not None and (residual < 0 or residual % group):
        raise InputError("error.residual", value=residual, group=group)


def quantized_nll(
    loaded: LoadedModel, ids: list[int], bits: int, kept: torch.Tensor, group: int = GROUP,
    residual: int | None = RESIDUAL,
) -> np.ndarray:  # fmt: skip
    """NLL of ids[1:] when every layer's attention reads its keys and values from a ``bits``-bit causal cache with
    a full-precision residual window (``residual=None``: the non-causal bound)."""
    check_ids(require_loaded(loaded), ids)
    loaded.check_length(len(ids))  # the one token limit a text meets, before any work
    loaded.require(Can.QUANTIZE_KV)
    if len(ids) < 2:
        raise InputError("error.kv_two_tokens", n=len(ids))
    ranges.check_choice("bits", bits, BITS)
    kept = _kept_per_token(kept, len(ids))
    check_residual(residual, group)
    keys_read, values_read = read_quantized(len(ids), group, residual)
    copy = 2 * keys_read.long() + values_read.long()  # (query, key): which of the four copies the pair reads

    def attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: object,
               scaling: float | None = None, softcap: float | None = None,
               s_aux: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:  # fmt: skip
        # key, value: (1, kv_head, token, head_dim); the copies: (full, full), (full, q), (q, full), (q, q)
        n = key.shape[2]
        key_q, value_q = quantize_keys(key, bits, kept, group), quantize_values(value, bits, kept, group)
        keys, values = torch.cat([key, key, key_q, key_q], 2), torch.cat([value, value_q, value, value_q], 2)
        visible = ~chunked.MaskFacts.of(mask, n, n, key.device).blocked  # (query, key): the layer's own mask
        chosen = copy[:n, :n].to(key.device)[:, None, :] == torch.arange(4, device=key.device)[None, :, None]
        reads = (visible[:, None, :] & chosen).flatten(1)  # (query, 4 * key), copy-major like the cat above
        return chunked.eager(query, keys, values, reads[None, None], scaling, softcap, s_aux)

    with attention.overriding(attend):
        return dense(loaded, ids)


@dataclass(frozen=True)
class KVRow:
    """One cache: its bits (0 for the dense float cache), its protection, its residual window (None: the non-causal
    bound), and the NLL of every next token."""

    bits: int
    protect: str
    nll: np.ndarray
    residual: int | None = RESIDUAL

    @property
    def perplexity(self) -> float:
        return perplexity(self.nll)


def quantized_table(
    loaded: LoadedModel, trace: Trace, bits: tuple[int, ...] = BITS, protections: tuple[str, ...] = PROTECTIONS,
    residual: int | None = RESIDUAL, progress: Progress | None = None,
) -> list[KVRow]:  # fmt: skip
    """The dense cache, then every bits x protection with a ``residual`` window, on ``trace``'s text (its sinks
    detected from it); ``progress`` may stop the run after any row, keeping the rows measured."""
    trace = require_trace_of(loaded, trace)
    bits, protections = _choices("bits", bits, BITS), _choices("protections", protections, PROTECTIONS)
    check_residual(residual)
    if trace.n_tokens < 2:  # checked before the dense row, which would be an empty perplexity
        raise InputError("error.kv_two_tokens", n=trace.n_tokens)
    ids, sinks = list(trace.token_ids), detected_sinks(trace)
    asked = [(b, protect) for b in bits for protect in protections]
    rows = [KVRow(0, "none", dense(loaded, ids), residual)]
    for b, protect in asked:
        if progress is not None and not progress(rows, 1 + len(asked)):
            break
        kept = protected(protect, len(ids), sinks)
        rows.append(KVRow(b, protect, quantized_nll(loaded, ids, b, kept, residual=residual), residual))
    return rows


SECOND_KEYS = {"none": "kv.second_none"}  # "below nothing" reads as no comparison: name the cache instead
CLAIM_BITS = 2  # the scoreboard's quantized cache: where protection matters most
CLAIM_TEXTS = 3  # built-in documents the scoreboard pools with the visitor's text
CLAIM_TOKENS = 256  # ... the first tokens of each


def won_back(dense: np.ndarray, bare: np.ndarray, kept: np.ndarray) -> float:
    """The share of the loss a quantized cache adds (mean nats per token over the float cache's, as the loss curves
    plot it) that keeping tokens in full precision wins back (per-token NLL: dense, nothing kept, tokens kept); 0
    where the quantized cache adds no loss."""
    dense_loss, bare_loss, kept_loss = (float(np.mean(nll)) for nll in (dense, bare, kept))
    return (bare_loss - kept_loss) / (bare_loss - dense_loss) if bare_loss > dense_loss else 0.0


def won_back_interval(dense: np.ndarray, bare: np.ndarray, kept: np.ndarray) -> Interval:
    """``won_back`` with its bootstrap interval over the text's tokens (the three runs resampled together)."""
    means = resampled_means(np.stack([dense, bare, kept]), resample_counts(len(dense)))  # (run, draw)
    added = means[1] - means[0]
    shares = np.where(added > 0, (means[1] - means[2]) / np.where(added > 0, added, 1.0), 0.0)
    return interval_of(won_back(dense, bare, kept), shares)


@dataclass(frozen=True)
class ClaimRuns:
    """The scoreboard's evidence: per-token NLL of the float cache, and of a CLAIM_BITS-bit cache with nothing and
    with the detected sinks kept, over the visitor's text and then CLAIM_TEXTS built-in documents, one after another
    (one text's interval would judge one text's noise)."""

    dense: np.ndarray
    bare: np.ndarray
    kept: np.ndarray
    own: int  # the first ``own`` NLLs are the visitor's text's
    texts: int  # the texts pooled, the visitor's included

    def of_own(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dense, bare, kept) of the visitor's text alone."""
        return self.dense[: self.own], self.bare[: self.own], self.kept[: self.own]


def claim_runs(loaded: LoadedModel, trace: Trace) -> ClaimRuns:
    """The three caches on ``trace``'s text and on the first CLAIM_TOKENS tokens of CLAIM_TEXTS built-in documents,
    each text's sinks detected on itself."""
    trace = require_trace_of(loaded, trace)
    from sinkscope.census.corpus import builtin_documents

    others = [loaded.encode(doc, CLAIM_TOKENS, truncate=True, add_bos=False) for doc in builtin_documents()]
    texts = [(list(trace.token_ids), trace)] + [(ids, None) for ids in others[:CLAIM_TEXTS]]
    runs = []
    for ids, analysis in texts:
        sinks = detected_sinks(analysis if analysis is not None else analyze_ids(loaded, ids))
        bare, kept = (quantized_nll(loaded, ids, CLAIM_BITS, protected(p, len(ids), sinks)) for p in ("none", "sinks"))
        runs.append((dense(loaded, ids), bare, kept))
    pooled = (np.concatenate(column) for column in zip(*runs, strict=True))
    return ClaimRuns(*pooled, own=trace.n_tokens - 1, texts=len(texts))


def said(rows: list[KVRow]) -> Message | None:
    """At the fewest bits measured: the cache without protection against dense, and the best protection's rescue,
    named best only where its gap to the next protection (or to nothing kept) is wider than the text's noise."""
    dense_row = next((row for row in rows if row.bits == 0), None)
    fewest = min((row.bits for row in rows if row.bits), default=None)
    at = {row.protect: row for row in rows if row.bits == fewest}
    if dense_row is None or fewest is None or "none" not in at or len(at) < 2:
        return None
    best = min((protect for protect in at if protect != "none"), key=lambda p: at[p].perplexity)
    second = min((protect for protect in at if protect != best), key=lambda p: at[p].perplexity)
    cost, gap = mean_difference(at["none"].nll, dense_row.nll), mean_difference(at[second].nll, at[best].nll)
    rival = Message.of(SECOND_KEYS.get(second, PROTECT_KEYS[second]))
    return Message.of("kv.said" if gap.excludes() else "kv.said_noise", bits=fewest,
                      none=round(at["none"].perplexity, 1), dense=round(dense_row.perplexity, 1),
                      ratio=times(at["none"].perplexity / dense_row.perplexity), ratio_low=math.exp(cost.low),
                      ratio_high=math.exp(cost.high), best=Message.of(PROTECT_KEYS[best]),
                      kept=round(at[best].perplexity, 1), second=rival,
                      low=gap.low, high=gap.high, level=round(100 * LEVEL))  # fmt: skip
