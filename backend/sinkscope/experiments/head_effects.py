"""Each head alone restricted to fewer keys, and what it costs the text's mean next-token loss: estimated for every
head at once, measured exactly where the estimate cannot settle a head.

The estimate is attribution patching (Nanda 2023; Syed, Rager and Conmy 2023): restricting head h changes its output
z_h (before the output projection) at every query t, and to first order the loss by sum_t g_{h,t} . (z^restricted_{h,t}
- z_{h,t}), g being the loss's gradient with respect to z. One forward computes every head's dense and restricted
outputs (only the attention rows differ, so the restricted ones reuse the layer's queries, keys and values), one
backward every g: about two and a half forwards for all heads.

The exact change runs a layer's chosen heads as lanes of one batch from that layer's input, taken from a dense pass,
so layer l costs L - l blocks per head and nothing before it is computed again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from sinkscope.core import attention, chunked
from sinkscope.core.capture import block_call, call_block, run_forward
from sinkscope.core.errors import ModelLoadError
from sinkscope.core.loss import TAILS, resample_counts, resampled_means, token_nll
from sinkscope.core.models import LoadedModel

TAIL_TOLERANCE = 1e-3  # nats: the final norm and LM head applied here must give the model's own loss


@dataclass(frozen=True)
class Cells:
    """Per head, the change of the text's mean next-token loss when that head alone is restricted."""

    dense_nll: np.ndarray  # (token - 1,)
    change: np.ndarray  # (layer, head): mean NLL restricted - dense, in nats; NaN: not measured (stopped)
    low: np.ndarray  # (layer, head): an exact cell's LEVEL bootstrap interval over tokens; an estimated cell's
    high: np.ndarray  # band (``estimate_band``)
    estimated: np.ndarray  # (layer, head) bool: cells holding the first-order estimate


Progress = Callable[[Cells], bool]  # the cells so far -> keep going?
Pause = Callable[[], None]  # between two blocks of a unit: a server lets waiting visitors in (or meets a Stop)


def estimate_band(estimate: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """An estimate's (low, high): ``margin`` nats either way (the bench's finding: the error does not shrink with the
    estimate, so the band is a fixed width)."""
    return estimate - margin, estimate + margin


@dataclass
class Probes:
    """An attention override that returns the dense output plus a zero probe whose gradient is g, and keeps each
    head's restricted output beside it."""

    allowed: torch.Tensor  # (1, 1, query, key) bool: the keys a restricted head may read
    probes: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (1, token, head, d) zeros, grad kept
    shifts: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (1, token, head, d): restricted - dense

    def attend(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask: object, scaling: float | None = None, softcap: float | None = None,
               s_aux: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:  # fmt: skip
        out, _ = chunked.eager(query, key, value, mask, scaling, softcap, s_aux)  # (1, token, head, d)
        with torch.no_grad():
            blocked = chunked.MaskFacts.of(mask, query.shape[2], key.shape[2], query.device).blocked
            restricted, _ = chunked.eager(query, key, value, self.allowed & ~blocked, scaling, softcap, s_aux)
        probe = torch.zeros_like(out, requires_grad=True)
        self.probes[module.layer_idx] = probe
        self.shifts[module.layer_idx] = restricted - out.detach()
        return out + probe, None


def estimate(loaded: LoadedModel, ids: list[int], allowed: torch.Tensor, margin: float) -> Cells:
    """Every head's first-order change of the mean NLL of ids[1:] when it alone reads only the ``allowed``
    (1, 1, query, key) keys, every other head dense (NaN for a layer without attention), with its band
    (``estimate_band``). The caller checks the model and the text."""
    model, info = loaded.model, loaded.info
    probes = Probes(allowed.to(model.device))
    inputs = torch.tensor([ids], device=model.device)  # (batch=1, token)
    with torch.enable_grad(), attention.overriding(probes.attend):
        logits = model(input_ids=inputs, use_cache=False).logits[0, :-1].float()  # (token - 1, vocab)
        loss = torch.nn.functional.cross_entropy(logits, inputs[0, 1:])
        layers = sorted(probes.probes)
        grads = torch.autograd.grad(loss, [probes.probes[layer] for layer in layers])  # only what reaches a probe
    change = np.full((info.n_layers, info.n_heads), np.nan)
    for layer, grad in zip(layers, grads, strict=True):
        change[layer] = (grad * probes.shifts[layer]).sum(dim=(0, 1, 3)).double().cpu().numpy()  # (head,)
    dense_nll = token_nll(logits.detach(), inputs[0, 1:])
    return Cells(dense_nll, change, *estimate_band(change, margin), np.isfinite(change))


@dataclass
class Restricted:
    """Attention where ``restricted[lane, layer, head]`` heads read only their ``allowed`` keys, every other head
    dense."""

    restricted: torch.Tensor  # (lane, layer, head) bool
    allowed: torch.Tensor  # (1, 1, query, key) bool: the keys a restricted head may read

    def attend(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask: object, scaling: float | None = None, softcap: float | None = None,
               s_aux: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:  # fmt: skip
        # query (lane, head, token, head_dim); key, value (lane, kv_head, token, head_dim) -> (lane, token, head, d)
        out = self._each_lane(query, key, value, mask, scaling, softcap, s_aux)
        restricted = self.restricted[:, module.layer_idx].to(out.device)  # (lane, head)
        if restricted.any():
            n_queries, n_keys = query.shape[2], key.shape[2]
            allowed = self.allowed & ~chunked.MaskFacts.of(mask, n_queries, n_keys, query.device).blocked
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


def _run_blocks(loaded: LoadedModel, hidden: torch.Tensor, first: int, call: dict,
                pause: Pause | None = None) -> torch.Tensor:  # fmt: skip
    """Blocks ``first`` .. L-1 on (lane, token, d_model) ``hidden``, with what the model passes every block;
    ``pause`` after each block."""
    for block in loaded.blocks[first:]:
        hidden = call_block(block, hidden, call)
        if pause is not None:
            pause()
    return hidden


def _dense_stream(loaded: LoadedModel, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """h^0 .. h^L of a dense pass (layer + 1, token, d_model), and the NLL of ids[1:] from the same pass' logits."""
    model = loaded.model
    recorder = loaded.recorder(reduce=False, residual=loaded.stream_buffer(len(ids)))
    logits = run_forward(loaded, ids, recorder, logits_from=0)  # (token, vocab)
    targets = torch.tensor(ids[1:], device=model.device)
    return torch.from_numpy(recorder.residual).to(model.device, model.dtype), torch.from_numpy(
        token_nll(logits[:-1], targets))  # fmt: skip


def first_changed(allowed: torch.Tensor) -> int:
    """The first query that loses a key it could see: the predictions before it are the dense ones."""
    causal = torch.ones(allowed.shape[-2:], dtype=torch.bool).tril()  # (query, key)
    lost = (causal & ~allowed[0, 0].cpu()).any(-1)  # (query,)
    return int(lost.byte().argmax()) if lost.any() else allowed.shape[-2]


def without_first_key(n_tokens: int) -> torch.Tensor:
    """(1, 1, query, key) bool: every key but the first; query 0, which sees only it, keeps its row (DropFirst)."""
    allowed = torch.ones(n_tokens, n_tokens, dtype=torch.bool)
    allowed[1:, 0] = False
    return allowed[None, None]


def unmeasured(loaded: LoadedModel) -> Cells:
    """Every cell not measured yet: where the exact map starts."""
    shape = (loaded.info.n_layers, loaded.info.n_heads)
    return Cells(np.zeros(0), *(np.full(shape, np.nan) for _ in range(3)), np.zeros(shape, dtype=bool))


@dataclass(frozen=True)
class Dense:
    """What every unit of the exact map reads from one dense pass."""

    stream: torch.Tensor  # (layer + 1, token, d_model): h^0 .. h^L
    call: dict  # what the model passes every block
    targets: torch.Tensor  # (token - 1,): ids[1:]
    nll: torch.Tensor  # (token - 1,): the dense NLL, through the same final norm and LM head as a unit's
    reached: int  # the first prediction a restriction can change


def _unit(loaded: LoadedModel, dense: Dense, allowed: torch.Tensor, layer: int, heads: np.ndarray,
          change_shape: tuple[int, int], pause: Pause | None = None) -> torch.Tensor:  # fmt: skip
    """(lane, token - 1): the NLL change of each of ``heads`` of ``layer`` restricted alone, a lane each (0 where
    every key is seen)."""
    restricted = torch.zeros(len(heads), *change_shape, dtype=torch.bool)  # (lane, layer, head)
    restricted[torch.arange(len(heads)), layer, torch.from_numpy(heads)] = True
    hidden = dense.stream[layer].expand(len(heads), -1, -1)  # (lane, token, d_model): the layer's dense input
    with attention.overriding(Restricted(restricted, allowed.to(loaded.model.device)).attend):
        final = _run_blocks(loaded, hidden, layer, dense.call, pause)[:, dense.reached : -1]  # (lane, position, d)
        ablated = _final_nll(loaded, final, dense.targets[dense.reached :])
    per_token = torch.zeros(len(heads), len(dense.nll))
    per_token[:, dense.reached :] = ablated - dense.nll[dense.reached :]
    return per_token


def _dense(loaded: LoadedModel, ids: list[int], allowed: torch.Tensor) -> Dense:
    stream, model_nll = _dense_stream(loaded, ids)
    targets = torch.tensor(ids[1:], device=loaded.model.device)
    nll = _final_nll(loaded, stream[-1:, :-1], targets)[0]
    if float((nll - model_nll).abs().max()) > TAIL_TOLERANCE:  # a family scaling its logits its own way
        raise ModelLoadError("error.kv_heads_model", family=loaded.family.name)
    return Dense(stream, block_call(loaded, ids), targets, nll, min(first_changed(allowed), len(ids) - 1))


def lanes(layer: int, n_layers: int) -> int:
    """Heads of ``layer`` run together in one unit: as many as keep it within about one forward pass (each lane
    runs the blocks from ``layer`` on), so Stop and other visitors wait at most that long between units."""
    return max(1, n_layers // (n_layers - layer))


def units(start: Cells, chosen: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(layer, heads) of at most ``lanes(layer)`` chosen heads each, the layers holding the largest ``start``
    changes first (an unknown change first of all)."""
    first = np.nan_to_num(np.where(chosen, start.change, -np.inf), nan=np.inf).max(-1)  # (layer,)
    layers = sorted(np.flatnonzero(chosen.any(-1)), key=lambda layer: -first[layer])
    found = []
    for layer in layers:
        heads = np.flatnonzero(chosen[layer])
        size = lanes(layer, chosen.shape[0])
        found += [(int(layer), heads[at : at + size]) for at in range(0, len(heads), size)]
    return found


def exact(loaded: LoadedModel, ids: list[int], allowed: torch.Tensor, start: Cells, chosen: np.ndarray,
          progress: Progress | None = None, pause: Pause | None = None) -> Cells:  # fmt: skip
    """``start`` with its ``chosen`` (layer, head) cells measured exactly, in ``units``; ``progress`` hears each
    unit and may stop the run after it, keeping what it measured; ``pause`` runs between the blocks of a unit (a
    server lets other visitors in there). The caller checks the model and the text."""
    change, low, high, estimated = (array.copy() for array in (start.change, start.low, start.high, start.estimated))
    counts = resample_counts(len(ids) - 1)  # one set of resamples for every head: their intervals compare
    with torch.inference_mode():
        dense = _dense(loaded, ids, allowed)
        for layer, heads in units(start, chosen):
            per_token = _unit(loaded, dense, allowed, layer, heads, change.shape, pause).numpy()  # (lane, token - 1)
            change[layer, heads] = per_token.mean(-1)
            low[layer, heads], high[layer, heads] = np.quantile(resampled_means(per_token, counts), TAILS, -1)
            estimated[layer, heads] = False
            cells = Cells(dense.nll.numpy(), change, low, high, estimated)
            if progress is not None and not progress(replace(cells, **copies(cells))):
                break
    return Cells(dense.nll.numpy(), change, low, high, estimated)


def copies(cells: Cells) -> dict[str, np.ndarray]:
    return {name: getattr(cells, name).copy() for name in ("change", "low", "high", "estimated")}
