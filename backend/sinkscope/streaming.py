"""StreamingLLM (Xiao et al., ICLR 2024): a rolling KV cache of S sink tokens plus the last W tokens.

Keys are stored before the rotary rotation and re-rotated to their positions inside the cache
(0 .. size-1) at every step, as StreamingLLM does for RoPE models. The methods of metrics.md
each give a per-token negative log-likelihood; perplexity is exp(mean).

Several caches of one size stream side by side as one batch ("lanes": the window and the sinks method, or
every sink count of a sweep): one token through a small model on a CPU costs about as much for five lanes as
for one, because it is bound by reading the weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from sinkscope import attention
from sinkscope.arrays import cache_band
from sinkscope.errors import InputError, ModelLoadError
from sinkscope.models import LoadedModel
from sinkscope.names import STREAM_METHODS

METHODS = STREAM_METHODS
Progress = Callable[[list[float], int], bool]  # (NLL so far, total) -> keep going?
LanesProgress = Callable[[np.ndarray, int], bool]  # ((lane, token) NLL so far, total) -> keep going?
MethodsProgress = Callable[[dict[str, list[float]], int], bool]  # ({method: NLL so far}, total) -> keep going?


@dataclass
class SinkCache:
    """Pre-rotation keys and values per layer for lanes of one size: lane b keeps its first ``sinks[b]`` tokens
    and the most recent ones, ``capacity`` tokens in all."""

    sinks: tuple[int, ...]
    capacity: int
    keys: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (lane, kv_head, size, head_dim)
    values: dict[int, torch.Tensor] = field(default_factory=dict)
    kept: list[list[int]] = field(default_factory=list)  # per lane: the text position of every entry, in order
    seen: int = 0  # tokens admitted so far

    def __post_init__(self) -> None:
        if not self.sinks or min(self.sinks) < 0 or self.capacity <= max(self.sinks):
            raise InputError("error.window")
        self.kept = [[] for _ in self.sinks]
        survivors = [[i for i in range(self.capacity) if i != sinks] for sinks in self.sinks]
        self._survivors = torch.tensor(survivors)  # (lane, capacity - 1): what stays when a lane evicts

    def admit(self) -> int:
        """Make room for the next token of the text; return its position inside the cache."""
        if self.seen >= self.capacity:  # full: every lane drops its oldest token that is not a sink
            for kept, sinks in zip(self.kept, self.sinks, strict=True):
                del kept[sinks]
            for store in (self.keys, self.values):
                for layer, tensor in store.items():
                    lanes, heads, _, dim = tensor.shape
                    index = self._survivors.to(tensor.device)[:, None, :, None].expand(lanes, heads, -1, dim)
                    store[layer] = tensor.gather(2, index)  # (lane, kv_head, capacity - 1, head_dim)
        for kept in self.kept:
            kept.append(self.seen)
        self.seen += 1
        return len(self.kept[0]) - 1

    def append(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Add one token's (lane, kv_head, 1, head_dim) key and value to a layer."""
        for store, new in ((self.keys, key), (self.values, value)):
            store[layer] = torch.cat([store[layer], new], dim=2) if layer in store else new


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rotary_of(model: torch.nn.Module) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """positions -> (cos, sin), each (position, head_dim), from the model's one standard rotary embedding."""
    config = model.config.get_text_config()
    rope = getattr(model.base_model, "rotary_emb", None)
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope is None or rope_type != "default" or getattr(config, "layer_types", None):
        raise ModelLoadError("error.streaming_model", model_type=config.model_type)

    def cos_sin(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = rope(rope.inv_freq.float(), positions[None])  # (1, position, head_dim)
        return cos[0], sin[0]

    return cos_sin


def _stream_attention(
    cache: SinkCache, rotary: tuple[torch.Tensor, torch.Tensor], module: torch.nn.Module, query: torch.Tensor,
    key: torch.Tensor, value: torch.Tensor, attention_mask: object, scaling: float | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, None]:  # fmt: skip
    """One new token per lane against the cache: un-rotate its key, store it, re-rotate every key to its slot."""
    size = len(cache.kept[0])
    cos, sin = rotary[0][:size], rotary[1][:size]  # (size, head_dim): cache positions 0..size-1
    new_key = key * cos[-1] - rotate_half(key) * sin[-1]  # (lane, kv_head, 1, head_dim), undo R(size - 1)
    cache.append(module.layer_idx, new_key, value)
    stored = cache.keys[module.layer_idx]
    keys = stored * cos + rotate_half(stored) * sin  # (lane, kv_head, size, head_dim), positions 0..size-1
    values = cache.values[module.layer_idx]
    lanes = [attention.eager(query[b : b + 1], keys[b : b + 1], values[b : b + 1], None, scaling, softcap)[0]
             for b in range(query.shape[0])]  # fmt: skip  # the model's own math, one lane at a time
    return torch.cat(lanes), None  # (lane, 1, head, head_dim)


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Negative log-likelihood of each target under (position, vocab) logits."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return (-log_probs.gather(-1, targets[:, None])[:, 0]).cpu().numpy()


@contextmanager
def streamer(
    loaded: LoadedModel, sinks: tuple[int, ...], capacity: int
) -> Iterator[tuple[Callable[[list[int]], torch.Tensor], SinkCache]]:
    """A step function feeding one token per lane through the lanes' caches -> their (lane, vocab) logits."""
    model, cache = loaded.model, SinkCache(sinks, capacity)
    rotary = rotary_of(model)(torch.arange(cache.capacity, device=model.device))  # every slot's angle, once
    attend = partial(_stream_attention, cache, rotary)

    def step(tokens: list[int]) -> torch.Tensor:
        position = cache.admit()
        inputs = torch.tensor(tokens, device=model.device)[:, None]  # (lane, 1)
        positions = torch.full_like(inputs, position)
        return model(input_ids=inputs, position_ids=positions, use_cache=False).logits[:, -1]

    with attention.overriding(attend), torch.inference_mode():
        yield step, cache


def stream_lanes(
    loaded: LoadedModel, ids: list[int], sinks: tuple[int, ...], capacity: int,
    progress: LanesProgress | None = None,
) -> tuple[np.ndarray, SinkCache]:  # fmt: skip
    """Token-by-token NLL of ids[1:], (lane, token), for caches of ``capacity`` keeping ``sinks[b]`` first tokens."""
    nll: list[np.ndarray] = []
    targets = torch.tensor(ids[1:])
    with streamer(loaded, sinks, capacity) as (step, cache):
        for t in range(len(ids) - 1):
            nll.append(_nll(step([ids[t]] * len(sinks)), targets[t].repeat(len(sinks))))  # (lane,)
            if progress is not None and not progress(np.stack(nll, axis=1), len(ids) - 1):
                break
    return np.stack(nll, axis=1) if nll else np.zeros((len(sinks), 0)), cache


def stream(
    loaded: LoadedModel, ids: list[int], sinks: int, window: int, progress: Progress | None = None
) -> tuple[np.ndarray, SinkCache]:
    """Token-by-token NLL of ids[1:] with a sinks + window cache (sinks=0: plain window)."""
    report = None if progress is None else lambda so_far, total: progress(list(so_far[0]), total)
    nll, cache = stream_lanes(loaded, ids, (sinks,), sinks + window, report)
    return nll[0], cache


def stream_methods(
    loaded: LoadedModel, ids: list[int], methods: tuple[str, ...], sinks: int, window: int,
    progress: MethodsProgress | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The real-cache methods ("window", "sinks") streamed side by side: both hold S + W tokens."""
    lanes = tuple(sinks if method == "sinks" else 0 for method in methods)
    by_method = lambda so_far: {m: list(so_far[i]) for i, m in enumerate(methods)}  # noqa: E731
    report = None if progress is None else lambda so_far, total: progress(by_method(so_far), total)
    nll, _ = stream_lanes(loaded, ids, lanes, sinks + window, report)
    return {method: nll[i] for i, method in enumerate(methods)}


def generate_lanes(
    loaded: LoadedModel, prompt: list[int], n_new: int, sinks: tuple[int, ...], capacity: int,
    progress: Progress | None = None,
) -> list[list[int]]:  # fmt: skip
    """Greedy continuations of ``prompt``, one per lane's cache: without sinks it turns to gibberish.

    ``progress`` gets the first lane's tokens so far (as floats) after each step, and stops by returning False.
    """
    out: list[list[int]] = [[] for _ in sinks]
    with streamer(loaded, sinks, capacity) as (step, _):
        for token in prompt[:-1]:
            step([token] * len(sinks))
        tokens = [prompt[-1]] * len(sinks)
        for _ in range(n_new):
            tokens = step(tokens).argmax(dim=-1).tolist()
            for lane, token in zip(out, tokens, strict=True):
                lane.append(token)
            if progress is not None and not progress([float(t) for t in out[0]], n_new):
                break
    return out


def generate(
    loaded: LoadedModel, prompt: list[int], n_new: int, sinks: int, window: int, progress: Progress | None = None
) -> list[int]:
    """Greedy continuation of ``prompt`` with a bounded cache of ``sinks`` + ``window`` tokens."""
    return generate_lanes(loaded, prompt, n_new, (sinks,), sinks + window, progress)[0]


def dense(loaded: LoadedModel, ids: list[int], mask: torch.Tensor | None = None) -> np.ndarray:
    """NLL of ids[1:] from one forward over the whole text (optionally under a 4-D attention mask)."""
    inputs = torch.tensor([ids], device=loaded.model.device)
    with torch.inference_mode():
        logits = loaded.model(input_ids=inputs, attention_mask=mask, use_cache=False).logits[0, :-1]
    return _nll(logits, inputs[0, 1:])


def band_mask(n_tokens: int, sinks: int, window: int) -> torch.Tensor:
    """(1, 1, query, key) bool: each query sees its last ``window`` tokens and the first ``sinks``."""
    return torch.from_numpy(cache_band(n_tokens, sinks, window))[None, None]


def recompute(loaded: LoadedModel, ids: list[int], window: int, progress: Progress | None = None) -> np.ndarray:
    """NLL of each next token from the last ``window`` tokens re-encoded from scratch (batched)."""
    head = dense(loaded, ids[:window])  # the first window-1 predictions see their whole prefix anyway
    starts = list(range(len(ids) - window))  # window s..s+W-1 predicts token s+W
    nll, batch = [head], 16
    with torch.inference_mode():
        for i in range(0, len(starts), batch):
            chunk = starts[i : i + batch]
            inputs = torch.tensor([ids[s : s + window] for s in chunk], device=loaded.model.device)
            logits = loaded.model(input_ids=inputs, use_cache=False, logits_to_keep=1).logits[:, -1]
            targets = torch.tensor([ids[s + window] for s in chunk], device=logits.device)
            nll.append(_nll(logits, targets))
            done = np.concatenate(nll)
            if progress is not None and not progress(list(done), len(ids) - 1):
                break
    return np.concatenate(nll)


def perplexity(nll: np.ndarray) -> float:
    return float(math.exp(float(np.mean(nll)))) if len(nll) else float("nan")


def streaming_nll(
    loaded: LoadedModel, ids: list[int], method: str, sinks: int, window: int, progress: Progress | None = None
) -> np.ndarray:
    """Per-token NLL of ids[1:] by one of METHODS. Every bounded method holds S + W tokens in all."""
    if method == "dense":
        return dense(loaded, ids)
    if method == "window":
        return stream(loaded, ids, 0, sinks + window, progress)[0]
    if method == "sinks":
        return stream(loaded, ids, sinks, window, progress)[0]
    if method == "recompute":
        return recompute(loaded, ids, sinks + window, progress)
    if method == "mask-window":
        return dense(loaded, ids, band_mask(len(ids), 0, sinks + window))
    if method == "mask-sinks":
        return dense(loaded, ids, band_mask(len(ids), sinks, window))
    raise InputError("error.unknown_method", method=method, choices=", ".join(METHODS))


def builtin_text() -> str:
    """A long English text that ships with every Python: the pydoc topic help."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def method_cache(method: str, sinks: int, window: int, n_tokens: int) -> tuple[int, int]:
    """(sinks, window) a method actually holds, for tables: bounded methods all hold S + W tokens."""
    if method == "dense":
        return 0, n_tokens
    if method in ("sinks", "mask-sinks"):
        return sinks, window
    return 0, sinks + window
