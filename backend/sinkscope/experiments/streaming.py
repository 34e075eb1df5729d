"""StreamingLLM (Xiao et al., ICLR 2024): a rolling KV cache of S sink tokens plus the last W tokens.

Attention scores follow StreamingLLM's positions inside the cache (0 .. size-1) for RoPE models, computed
without re-rotating the cache: keys keep their text position's rotation in a preallocated ring, and only the
query is turned back for the sink tokens. The methods of metrics.md
each give a per-token negative log-likelihood; perplexity is exp(mean).

Several caches of one size stream side by side as one batch ("lanes": the window and the sinks method, or
every sink count of a sweep): one token through a small model on a CPU costs about as much for five lanes as
for one, because it is bound by reading the weights.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from sinkscope.core import attention, chunked, ranges
from sinkscope.core.arrays import cache_band
from sinkscope.core.capabilities import Can
from sinkscope.core.errors import InputError
from sinkscope.core.loss import token_nll
from sinkscope.core.models import LoadedModel, check_ids, require_loaded
from sinkscope.core.names import STREAM_METHODS

METHODS = STREAM_METHODS
Progress = Callable[[list[float], int], bool]  # (NLL so far, total) -> keep going?
LanesProgress = Callable[[np.ndarray, int], bool]  # ((lane, token) NLL so far, total) -> keep going?
MethodsProgress = Callable[[dict[str, list[float]], int], bool]  # ({method: NLL so far}, total) -> keep going?


@dataclass
class SinkCache:
    """Keys and values per layer for lanes of one size, preallocated: lane b keeps its first ``sinks[b]`` tokens
    in slots 0 .. sinks[b]-1 and writes every later token over its oldest one that is not a sink (a ring)."""

    sinks: tuple[int, ...]
    capacity: int
    keys: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (lane, kv_head, capacity, head_dim)
    values: dict[int, torch.Tensor] = field(default_factory=dict)
    kept: list[list[int]] = field(default_factory=list)  # per lane: the text position of every entry, oldest first
    seen: int = 0  # tokens admitted so far

    def __post_init__(self) -> None:
        if not self.sinks or min(self.sinks) < 0 or self.capacity <= max(self.sinks):
            raise InputError("error.window")
        self.kept = [[] for _ in self.sinks]
        slots = torch.arange(self.capacity)
        self.is_sink = torch.stack([slots < sinks for sinks in self.sinks])  # (lane, slot)
        self._slots = torch.zeros(len(self.sinks), dtype=torch.long)  # (lane,): where the current token goes
        self.positions = torch.zeros(len(self.sinks), self.capacity, dtype=torch.long)  # (lane, slot): text position

    @property
    def size(self) -> int:
        """Entries each lane holds now."""
        return min(self.seen, self.capacity)

    def admit(self) -> list[int]:
        """Make room for the next token of the text; return the slot each lane writes it to."""
        t = self.seen
        ring = [sinks + (t - sinks) % (self.capacity - sinks) for sinks in self.sinks]
        slots = [t] * len(self.sinks) if t < self.capacity else ring
        for kept, sinks in zip(self.kept, self.sinks, strict=True):
            if t >= self.capacity:  # full: drop the oldest token that is not a sink
                del kept[sinks]
            kept.append(t)
        self.seen += 1
        self._slots = torch.tensor(slots)
        self.positions[torch.arange(len(self.sinks)), self._slots] = t
        return slots

    def in_window(self, window: int) -> torch.Tensor:
        """(lane, size) bool: the entries among each lane's last ``window`` in text order (a sliding layer's keys)."""
        oldest = torch.tensor([kept[-window] if len(kept) >= window else -1 for kept in self.kept])  # (lane,)
        return self.positions[:, : self.size] >= oldest[:, None]

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store one token's (lane, kv_head, 1, head_dim) key and value; return the filled (lane, kv_head, size,
        head_dim) keys and values."""
        lanes = torch.arange(len(self.sinks))
        for store, new in ((self.keys, key), (self.values, value)):
            if layer not in store:
                store[layer] = new.new_zeros(new.shape[0], new.shape[1], self.capacity, new.shape[3])
            store[layer][lanes, :, self._slots.to(new.device)] = new[:, :, 0]  # (lane, kv_head, head_dim)
        return self.keys[layer][:, :, : self.size], self.values[layer][:, :, : self.size]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


@dataclass(frozen=True)
class Rotary:
    """How each layer turns a query back by d positions, and which keys its sliding window leaves it."""

    # per layer: its rotary frequencies (rotary_dims / 2,), a partial rotary turning only the first rotary_dims of
    # each head; None where the layer does not rotate (SmolLM3's NoPE layers). Gemma-3's local and global differ.
    inv_freqs: tuple[torch.Tensor | None, ...]
    windows: tuple[int | None, ...]  # per layer: its sliding window (None: it sees the whole cache)

    @property
    def rope_layers(self) -> tuple[bool, ...]:
        return tuple(inv_freq is not None for inv_freq in self.inv_freqs)

    def turn_back(self, query: torch.Tensor, distance: int, layer: int = 0) -> torch.Tensor:
        """R(-distance) applied to the rotated dimensions of (..., head_dim) queries (half-split pairs, as
        transformers' rotate_half); attention scaling (YaRN) is left as it is, since only the angle changes."""
        angles = distance * self.inv_freqs[layer].to(query.device)  # (rotary_dims / 2,)
        cos, sin = torch.cat([angles, angles]).cos(), torch.cat([angles, angles]).sin()  # (rotary_dims,)
        turned, rest = query[..., : cos.numel()], query[..., cos.numel() :]
        return torch.cat([turned * cos - rotate_half(turned) * sin, rest], dim=-1)


def rotary_of(loaded: LoadedModel) -> Rotary:
    """The model's rotary embedding, where streaming can re-position its cache exactly (``Can.STREAM``): every layer's
    angles grow linearly with the position (a layer type may have its own frequencies: Gemma-3's local and global
    layers)."""
    loaded.require(Can.STREAM)
    model, family = loaded.model, loaded.family
    config, rope = model.config.get_text_config(), model.base_model.rotary_emb
    types = getattr(config, "layer_types", None) or [None] * config.num_hidden_layers
    frequencies = [rope.inv_freq if hasattr(rope, "inv_freq") else getattr(rope, f"{kind}_inv_freq") for kind in types]
    rotates = family.rope_layers(config)
    window = family.sliding_window(config)
    windows = [window if sliding else None for sliding in family.sliding_layers(config)]
    return Rotary(tuple(f.float() if turn else None for f, turn in zip(frequencies, rotates, strict=True)),
                  tuple(windows))  # fmt: skip


def _stream_attention(
    cache: SinkCache, rotary: Rotary, module: torch.nn.Module,
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: object,
    scaling: float | None = None, softcap: float | None = None, s_aux: torch.Tensor | None = None,
) -> tuple[torch.Tensor, None]:  # fmt: skip
    """One new token per lane against its cache, as StreamingLLM scores it at cache positions 0 .. size-1.

    Every key keeps the rotation of its text position, so the query (at text position t) sees each recent key
    at its cache distance unchanged; the sinks sit at cache positions 0 .. S-1, so for them alone the query is
    turned back by the number of evicted tokens (on layers that rotate at all). No stored key is ever rotated
    again. A learned sink logit (``s_aux``) takes its share of each row as in ``sinkscope.core.attention``.
    """
    keys, values = cache.write(module.layer_idx, key, value)  # (lane, kv_head, size, head_dim)
    lanes, n_heads, _, head_dim = query.shape
    n_kv = keys.shape[1]
    query = query * (head_dim**-0.5 if scaling is None else scaling)
    grouped = query.reshape(lanes, n_kv, n_heads // n_kv, head_dim)  # (lane, kv_head, group, head_dim)
    scores = grouped @ keys.transpose(2, 3)  # (lane, kv_head, group, size)
    n_sinks, evicted, layer = max(cache.sinks), cache.seen - cache.size, module.layer_idx
    if evicted and n_sinks and rotary.rope_layers[layer]:
        at_cache_end = rotary.turn_back(grouped, evicted, layer)  # the query at cache position size-1
        to_sinks = at_cache_end @ keys[:, :, :n_sinks].transpose(2, 3)  # (lane, kv_head, group, n_sinks)
        is_sink = cache.is_sink[:, None, None, :n_sinks].to(scores.device)  # (lane, 1, 1, n_sinks)
        scores[..., :n_sinks] = torch.where(is_sink, to_sinks, scores[..., :n_sinks])
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.float()
    if rotary.windows[layer] is not None:  # a sliding layer sees the cache's last `window` entries
        scores.masked_fill_(~cache.in_window(rotary.windows[layer])[:, None, None].to(scores.device), chunked.MIN_SCORE)
    weights, _ = chunked.attention_weights(scores.unsqueeze(-2), s_aux)  # (lane, kv, group, 1, size)
    mixed = weights[..., 0, :].to(values.dtype) @ values  # (lane, kv_head, group, head_dim)
    return mixed.reshape(lanes, n_heads, 1, head_dim).transpose(1, 2), None  # (lane, 1, head, head_dim)


@dataclass
class _OneThread:
    """Who runs one-token steps now: the first to come sets one torch thread, the last to leave restores the count.
    Nobody waits here: a run that lets a waiting visitor in (``RunQueue.let_others_in``) between its steps stays
    inside, and a lock held across that pause would block the visitor's own steps for ever."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    holders: int = 0
    threads: int = 0  # the count to restore


_ONE_THREAD = _OneThread()


@contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
    """One torch thread for a one-token step on a CPU, leaving the other cores to the browser and other visitors.

    Measured in the app with a browser on the same two cores (bench_interactive): the default streaming run
    24.5 s against 31.3 s on every thread, the generation demo 10.8 s against 15.5 s. On an otherwise idle machine
    one thread is slower (the loop alone: 1.09x for two lanes, 1.25x for five)."""
    if device.type != "cpu":
        yield
        return
    with _ONE_THREAD.lock:
        if _ONE_THREAD.holders == 0:
            _ONE_THREAD.threads = torch.get_num_threads()
            torch.set_num_threads(1)
        _ONE_THREAD.holders += 1
    try:
        yield
    finally:
        with _ONE_THREAD.lock:
            _ONE_THREAD.holders -= 1
            if _ONE_THREAD.holders == 0:
                torch.set_num_threads(_ONE_THREAD.threads)


@contextmanager
def streamer(
    loaded: LoadedModel, sinks: tuple[int, ...], capacity: int
) -> Iterator[tuple[Callable[[list[int]], torch.Tensor], SinkCache]]:
    """A step function feeding one token per lane through the lanes' caches -> their (lane, vocab) logits."""
    model, cache = loaded.model, SinkCache(sinks, capacity)
    rotary = rotary_of(loaded)

    def attend(*args: object, **kwargs: object) -> tuple[torch.Tensor, None]:
        return _stream_attention(cache, rotary, *args, **kwargs)

    def step(tokens: list[int]) -> torch.Tensor:
        cache.admit()
        inputs = torch.tensor(tokens, device=model.device)[:, None]  # (lane, 1)
        positions = torch.full_like(inputs, cache.seen - 1)  # the text position: keys are stored rotated by it
        with one_cpu_thread(model.device):
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
            nll.append(token_nll(step([ids[t]] * len(sinks)), targets[t].repeat(len(sinks))))  # (lane,)
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
    check_ids(require_loaded(loaded), prompt)
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


def dense(loaded: LoadedModel, ids: list[int], mask: torch.Tensor | dict | None = None) -> np.ndarray:
    """NLL of ids[1:] from one forward over the whole text (optionally under a 4-D attention mask, or one per layer
    type)."""
    inputs = torch.tensor([ids], device=loaded.model.device)
    with torch.inference_mode():
        logits = loaded.model(input_ids=inputs, attention_mask=mask, use_cache=False).logits[0, :-1]
    return token_nll(logits, inputs[0, 1:])


def band_mask(n_tokens: int, sinks: int, window: int, sliding: int | None = None) -> torch.Tensor:
    """(1, 1, query, key) bool: each query sees its last ``window`` tokens and the first ``sinks``; a layer with a
    ``sliding`` window sees only the newest ``sliding`` of those, as it does in the cache."""
    held = cache_band(n_tokens, sinks, window)  # (query, key)
    if sliding is not None:
        held &= np.cumsum(held[:, ::-1], axis=1)[:, ::-1] <= sliding  # each held key's rank from the newest
    return torch.from_numpy(np.ascontiguousarray(held))[None, None]


def cache_masks(loaded: LoadedModel, n_tokens: int, sinks: int, window: int) -> torch.Tensor | dict[str, torch.Tensor]:
    """The mask-emulation reference's masks: one band, or one per layer type where sliding and full layers mix
    (transformers takes a dict of them, keyed by ``layer_types``)."""
    config, family = loaded.model.config, loaded.family
    sliding, size = set(family.sliding_layers(config)), family.sliding_window(config)
    if len(sliding) == 1:
        return band_mask(n_tokens, sinks, window, size if sliding.pop() else None)
    return {"full_attention": band_mask(n_tokens, sinks, window),
            "sliding_attention": band_mask(n_tokens, sinks, window, size)}  # fmt: skip


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
            nll.append(token_nll(logits, targets))
            done = np.concatenate(nll)
            if progress is not None and not progress(list(done), len(ids) - 1):
                break
    return np.concatenate(nll)


def streaming_nll(
    loaded: LoadedModel, ids: list[int], method: str, sinks: int, window: int, progress: Progress | None = None
) -> np.ndarray:
    """Per-token NLL of ids[1:] by one of METHODS. Every bounded method holds S + W tokens in all."""
    check_ids(require_loaded(loaded), ids)
    ranges.check("sinks", sinks)
    ranges.check("window", window)
    if method == "dense":
        return dense(loaded, ids)
    if method == "window":
        return stream(loaded, ids, 0, sinks + window, progress)[0]
    if method == "sinks":
        return stream(loaded, ids, sinks, window, progress)[0]
    if method == "recompute":
        return recompute(loaded, ids, sinks + window, progress)
    if method == "mask-window":
        return dense(loaded, ids, cache_masks(loaded, len(ids), 0, sinks + window))
    if method == "mask-sinks":
        return dense(loaded, ids, cache_masks(loaded, len(ids), sinks, window))
    raise InputError("error.unknown_method", method=method, choices=", ".join(METHODS))


def method_cache(method: str, sinks: int, window: int, n_tokens: int) -> tuple[int, int]:
    """(sinks, window) a method actually holds, for tables: bounded methods all hold S + W tokens."""
    if method == "dense":
        return 0, n_tokens
    if method in ("sinks", "mask-sinks"):
        return sinks, window
    return 0, sinks + window
