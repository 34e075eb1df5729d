"""One forward pass -> an immutable Trace: per-head and per-layer metrics plus the residual stream.

Attention maps are never all kept (that is layers x heads x T^2): the chunked attention function
reduces them as it goes, and ``attention_maps`` recomputes one layer's maps on demand.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sinkscope.core import attention, metrics, ranges, slow
from sinkscope.core.arrays import pool_max
from sinkscope.core.errors import InputError, ModelLoadError
from sinkscope.core.models import LoadedModel, ModelInfo, check_ids, require_every_layer, require_loaded
from sinkscope.core.names import (
    DEFAULT_EPS,
    HEAD_COLUMNS,
    HEAD_METRICS,
    LAYER_COLUMNS,
    LAYER_METRICS,
    NO_ATTENTION,
    Kind,
)  # fmt: skip
from sinkscope.core.reduce import HEAD_SUMS
from sinkscope.core.tokens import display_tokens
from sinkscope.core.writes import Writes


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class Trace:
    """Everything one analysis found. Arrays are read-only; layer index l of ``layers`` is h^l.

    ``heads[metric]`` is (layer, head) and ``layers[metric]`` is (layer + 1,), named as in
    ``sinkscope.core.names`` and defined in docs/metrics.md. ``to_pandas()`` gives one row per head::

        trace = sinkscope.analyze(model, "The capital of France is Paris.")
        trace.to_pandas().sort_values("sink").tail(3)    # the strongest sink heads
        trace.to_pandas("layers")[["layer", "bos_cosine", "bos_cosine_raw"]]
    """

    model: str
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    heads: dict[str, np.ndarray]  # metric -> (layer, head); "kind" -> object array; also "value_norm_ratio",
    # "withheld" (mass softmax+1 would leave unread) and "output_norm" (mean ||head output W_O^h||)
    layers: dict[str, np.ndarray]  # metric -> (layer + 1,), h^0 = embeddings
    massive: tuple[tuple[int, int, int, float], ...]  # (layer, token, channel, value)
    residual: np.ndarray  # (layer + 1, token, d_model), float32
    first_key: np.ndarray  # (layer, head, query_pos), float32: the weight each query gives the first token
    key_sink: np.ndarray  # (layer, token): the attention each key receives from the queries after it (metrics.md)
    writes: Writes | None = None  # what each block wrote (``core.writes``); None where the stream is not their sum

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def shape(self) -> tuple[int, int]:
        """(layers, heads)."""
        return self.heads["sink"].shape

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The layers with attention heads: every one, but a hybrid's (Jamba's Mamba layers have none)."""
        return tuple(layer for layer, kinds in enumerate(self.heads["kind"]) if kinds[0] != NO_ATTENTION)

    @property
    def learned_sinks(self) -> bool:
        """Whether some head gave mass to a learned sink logit (gpt-oss); plain softmax gives exactly none."""
        return metrics.has_learned_sinks(self.heads)

    def sink_rate(self, eps: float = DEFAULT_EPS) -> float:
        return metrics.sink_rate(self.heads["sink"], eps)

    def sink_by_length(self, lengths: list[int] | np.ndarray) -> np.ndarray:
        """(length, layer, head): every head's sink score on the text's first ``length`` tokens, exact
        from this one pass (no query sees past itself)."""
        return metrics.prefix_sink(self.first_key, lengths)

    def head_rows(self) -> list[dict[str, object]]:
        """One row per (layer, head) with the columns of the CLI's heads.csv; a hybrid's layers without attention
        have no heads, so no rows."""
        rows = []
        for layer in self.attention_layers:
            for head in range(self.shape[1]):
                row = {"layer": layer, "head": head}
                row.update({m: float(self.heads[m][layer, head]) for m in HEAD_METRICS})
                row["kind"] = str(self.heads["kind"][layer, head])
                rows.append(row)
        return rows

    def layer_rows(self) -> list[dict[str, object]]:
        """One row per residual-stream layer with the columns of the CLI's layers.csv."""
        return [
            {"layer": layer, **{name: self.layers[name][layer].item() for name in LAYER_METRICS}}
            for layer in range(len(self.layers["top1"]))
        ]

    def key_rows(self) -> list[dict[str, object]]:
        """One row per attention layer and key with the columns of the CLI's keys.csv (``KEY_COLUMNS``); the last key,
        which no query follows, has no key_sink and no row."""
        return [
            {"layer": layer, "position": j, "token": self.tokens[j], "key_sink": float(self.key_sink[layer, j])}
            for layer in self.attention_layers
            for j in range(self.n_tokens - 1)
        ]

    def to_pandas(self, table: str = "heads") -> Any:
        """A pandas DataFrame: "heads" (one row per layer and head) or "layers" (one per h^l)."""
        import pandas as pd  # only here: the engine itself does not need pandas

        if table not in ("heads", "layers"):
            raise ValueError(f"table must be 'heads' or 'layers', not {table!r}")
        rows, columns = (self.head_rows(), HEAD_COLUMNS) if table == "heads" else (self.layer_rows(), LAYER_COLUMNS)
        return pd.DataFrame(rows, columns=list(columns))


def run_forward(
    loaded: LoadedModel, ids: list[int], recorder: attention.Recorder, logits_from: int | None = None
) -> torch.Tensor | None:
    """One forward pass; the LM head (T x vocab) only when asked: logits of positions ``logits_from ..``."""
    check_ids(require_loaded(loaded), ids)
    model = loaded.model
    input_ids = torch.tensor([ids], device=model.device)  # (batch=1, token)
    with torch.inference_mode(), attention.recording(recorder):
        try:
            if logits_from is not None:
                keep = len(ids) - logits_from
                return model(input_ids=input_ids, use_cache=False, logits_to_keep=keep).logits[0]  # (keep, vocab)
            model.base_model(input_ids=input_ids, use_cache=False)
        except attention.StopForward:
            pass
    return None


def head_metrics(recorder: attention.Recorder, info: ModelInfo, n_tokens: int) -> dict[str, np.ndarray]:
    """Per-head means of a recorder's sums: the metrics of metrics.md, ``kind``, and the teaching extras."""
    n_layers, attending = info.n_layers, [layer for layer in range(info.n_layers) if info.attends(layer)]
    require_every_layer(recorder, attending, info.family)
    counts = {name: n_tokens - 1 for name in HEAD_SUMS} | {"previous_token": n_tokens - 2}
    none = torch.full((info.n_heads,), float("nan"), dtype=torch.float64)  # a layer without attention: no heads
    heads = {}
    for name, count in counts.items():
        total = torch.stack([recorder.sums[name].get(layer, none) for layer in range(n_layers)])  # (layer, head)
        heads[name] = _frozen((total / count).numpy() if count > 0 else np.full(total.shape, np.nan))
    kinds = metrics.head_kinds(heads[Kind.SINK], heads[Kind.DIAGONAL], heads[Kind.PREVIOUS_TOKEN])
    kinds[[not info.attends(layer) for layer in range(n_layers)]] = NO_ATTENTION
    heads["kind"] = _frozen(kinds)
    # n_0 / median_{j>=1} n_j: how much the first token's value would write if it were read
    ratio = [recorder.first_value_ratio.get(layer, none) for layer in range(n_layers)]
    heads["value_norm_ratio"] = _frozen(torch.stack(ratio).numpy())  # (layer, head)
    return heads


def per_layer(kept: dict[int, torch.Tensor], info: ModelInfo, *shape: int) -> np.ndarray:
    """(layer, head, *shape) float32 from a recorder's per-layer tensors; NaN where a layer has no attention."""
    none = torch.full((info.n_heads, *shape), float("nan"))
    return torch.stack([kept[layer].float().cpu() if layer in kept else none for layer in range(info.n_layers)]).numpy()


def key_sinks(recorder: attention.Recorder, info: ModelInfo, n_tokens: int) -> np.ndarray:
    """key_sink (layer, token) from a recorder's column sums; NaN in a layer without attention."""
    none = np.full(n_tokens, np.nan)
    sums = np.stack([recorder.key_sums[layer].numpy() if layer in recorder.key_sums else none
                     for layer in range(info.n_layers)])  # fmt: skip
    return metrics.key_sink_of_sums(sums, info.n_heads)


def read_cosines(loaded: LoadedModel, residual: np.ndarray) -> np.ndarray:
    """bos_cosine per layer (layer + 1,) of the stream (layer + 1, token, d_model): the first token's cosine with
    the others in what attention reads (a post-norm family's attention reads h^l itself)."""
    model, cosines = loaded.model, []
    with torch.inference_mode():
        for norm, h in zip(loaded.family.read_norms(model), residual, strict=True):
            # the model's dtype holds the float32 copy of its own states exactly
            read = h if norm is None else norm(torch.from_numpy(h).to(model.device, model.dtype)).float().cpu().numpy()
            cosines.append(metrics.bos_cosine(read))  # read: (token, d_model)
    return np.array(cosines)


def _layer_metrics(residual: np.ndarray, bos_cosine: np.ndarray) -> tuple[dict[str, np.ndarray], tuple]:
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:  # numpy releases the GIL: use every core
        per_layer = list(pool.map(metrics.layer_scores, residual))
    layers = {name: np.array([scores[name] for scores in per_layer]) for name in LAYER_METRICS if name != "bos_cosine"}
    layers = {name: _frozen(values) for name, values in (layers | {"bos_cosine": bos_cosine}).items()}
    massive = tuple((layer, *hit) for layer, scores in enumerate(per_layer) for hit in scores["massive_list"])
    return layers, massive


def require_finite(residual: np.ndarray, dtype: str) -> None:
    """NaN or inf in a hidden state makes every number measured from it meaningless: stop, naming where it starts."""
    broken = ~np.isfinite(residual).all(axis=(1, 2))  # (layer + 1,)
    if broken.any():
        raise ModelLoadError("error.states_not_finite", layer=int(np.argmax(broken)), dtype=dtype)


def require_trace(value: object) -> Trace:
    """``value`` itself when it is an analysis from ``analyze``; a TypeError that says what to pass otherwise."""
    if not isinstance(value, Trace):
        shown = repr(value) if isinstance(value, str) else type(value).__name__
        raise TypeError(f"expected an analysis, trace = sinkscope.analyze(model, text), got {shown}")
    return value


def require_trace_of(loaded: LoadedModel, value: object) -> Trace:
    """``value`` when it is an analysis made with ``loaded``; an error that says what to pass otherwise."""
    trace = require_trace(value)
    if trace.model != require_loaded(loaded).info.name:  # its ids and sinks would be read by another vocabulary
        raise InputError("error.trace_other_model", trace_model=trace.model, model=loaded.info.name)
    return trace


def analyze_ids(loaded: LoadedModel, ids: list[int]) -> Trace:
    """Analyze a sequence of token ids in one forward pass (under ``sinkscope.intervene``: the changed run)."""
    require_loaded(loaded)
    if isinstance(ids, str | bytes) or not hasattr(ids, "__len__"):
        raise InputError("error.argument_type", name="ids", value=ranges.shown(ids), expected="a list of token ids")
    if not len(ids):
        raise InputError("error.empty_text")
    loaded.check_length(len(ids))  # the same limit a text meets, before any work
    ids = [int(i) if isinstance(i, np.integer) else i for i in ids]  # numpy ids (a Ray batch) as Python ints
    change = attention.current_change()
    ids = change.input_ids(ids) if change is not None else ids
    recorder = loaded.recorder(residual=loaded.stream_buffer(len(ids)), writes=loaded.writes_buffer(len(ids)))
    if loaded.family.slow:  # maps from transformers' eager attention: every layer's at once
        check_ids(loaded, ids)
        maps, values = slow.forward(loaded, ids, recorder)
        heads = {name: _frozen(values) for name, values in slow.head_metrics(loaded, maps, values).items()}
        first_key = torch.stack([layer_maps[:, :, 0] for layer_maps in maps]).cpu().numpy()  # (layer, head, query)
        key_sink = np.stack([metrics.key_sink(layer_maps.cpu().numpy()) for layer_maps in maps])  # (layer, token)
    else:
        run_forward(loaded, ids, recorder)
        heads, first_key = head_metrics(recorder, loaded.info, len(ids)), per_layer(recorder.first_key, loaded.info,
                                                                                    len(ids))  # fmt: skip
        key_sink = key_sinks(recorder, loaded.info, len(ids))
    residual = recorder.residual  # (layer + 1, token, d_model)
    require_finite(residual, loaded.info.dtype)
    writes = recorder.writes if recorder.writes is not None and recorder.writes.adds_up(residual) else None
    layers, massive = _layer_metrics(residual, read_cosines(loaded, residual))
    tokens = display_tokens(loaded.tokenizer, ids) if loaded.tokenizer is not None else tuple(map(str, ids))
    return Trace(
        model=loaded.info.name,
        token_ids=tuple(ids),
        tokens=tokens,
        heads=heads,
        layers=layers,
        massive=massive,
        residual=_frozen(residual),
        first_key=_frozen(first_key),
        key_sink=_frozen(key_sink.astype(np.float32)),
        writes=writes.frozen() if writes is not None else None,
    )


def analyze(
    loaded: LoadedModel,
    text: str,
    max_tokens: int | None = None,
    truncate: bool = False,
    add_bos: bool | None = None,
) -> Trace:
    """Tokenize ``text`` (at most ``max_tokens``, default the model's limit) and analyze it."""
    require_loaded(loaded)
    if not isinstance(text, str):
        raise InputError("error.argument_type", name="text", value=ranges.shown(text), expected="a str")
    for name, flag in (("truncate", truncate), ("add_bos", add_bos)):
        if not isinstance(flag, bool) and not (name == "add_bos" and flag is None):
            raise InputError("error.argument_type", name=name, value=ranges.shown(flag), expected="True or False")
    if max_tokens is not None:
        ranges.check("max_tokens", max_tokens)
    return analyze_ids(loaded, loaded.encode(text, max_tokens, truncate=truncate, add_bos=add_bos))


@dataclass(frozen=True)
class LayerMaps:
    """One layer's attention, recomputed exactly: weights (head, query_pos, key_pos), value_norms (head, key_pos)."""

    layer: int
    weights: np.ndarray
    value_norms: np.ndarray
    withheld: np.ndarray  # (head, query_pos): mass softmax+1 of the same scores would leave unread
    output_norms: np.ndarray  # (head, query_pos): ||sum_j A[t,j] v_j W_O^h||
    learned: np.ndarray  # (head, query_pos): the mass a learned sink logit took (gpt-oss; 0 for plain softmax)


def attention_maps(
    loaded: LoadedModel, ids: tuple[int, ...] | list[int], layer: int, start: np.ndarray | None = None
) -> LayerMaps:
    """Every head's attention map of one layer, and the value norms n_j of metrics.md.

    The forward stops right after ``layer``, so deep layers cost most and layer 0 costs little. Given ``start``,
    the layer's input h^layer (``trace.residual[layer]`` of the same text, under the same intervention), only
    that layer runs, on models whose blocks all take the same mask and positions.
    """
    require_loaded(loaded)
    if isinstance(layer, bool) or not isinstance(layer, int | np.integer) or not 0 <= layer < loaded.info.n_layers:
        raise InputError("error.layer_range", layer=ranges.shown(layer), last=loaded.info.n_layers - 1)
    if not loaded.info.attends(layer):
        raise InputError("error.no_attention_layer", layer=layer, model=loaded.info.family)
    if isinstance(ids, str | bytes) or not len(ids):
        raise InputError("error.empty_text")
    loaded.check_length(len(ids))
    check_ids(loaded, list(ids))
    if start is not None and tuple(np.shape(start)) != (len(ids), loaded.model.config.hidden_size):
        raise InputError("error.start_shape", shape=tuple(np.shape(start)), tokens=len(ids),
                         width=loaded.model.config.hidden_size)  # fmt: skip
    if loaded.family.slow:
        return _slow_maps(loaded, list(ids), layer)
    recorder = loaded.recorder(reduce=False, maps_of=frozenset({layer}), stop_after=layer)
    if start is not None and layer > 0 and _blocks_alike(loaded):
        _run_block(loaded, list(ids), layer, start, recorder)
    else:
        run_forward(loaded, list(ids), recorder)
    kept = (recorder.maps, recorder.norms, recorder.withheld, recorder.output_norms, recorder.learned)
    return LayerMaps(layer, *(_frozen(found[layer].float().cpu().numpy()) for found in kept))


def _slow_maps(loaded: LoadedModel, ids: list[int], layer: int) -> LayerMaps:
    """One layer of the slow path's forward (it runs every layer: its families take no input at a layer)."""
    maps, values = slow.forward(loaded, ids, loaded.recorder(reduce=False))
    measured = slow.layer_measures(loaded, layer, maps[layer], values[layer])
    weights = maps[layer].cpu().numpy()
    nothing = np.full(weights.shape[:2], np.nan, dtype=np.float32)  # withheld: the scores are the family's own
    return LayerMaps(layer, *(_frozen(np.asarray(found, dtype=np.float32)) for found in (
        weights, measured["value_norms"], nothing, measured["output_norms"], np.zeros(weights.shape[:2]))))  # fmt: skip


def _blocks_alike(loaded: LoadedModel) -> bool:
    """Every block takes the same mask and positions (no mix of sliding-window and full layers)."""
    return len(set(loaded.family.sliding_layers(loaded.model.config))) == 1


def block_call(loaded: LoadedModel, ids: list[int]) -> dict:
    """What the model passes every block for ``ids`` (its mask and positions: ``args`` and ``kwargs``), read off the
    first block's call; the forward stops there."""
    call = loaded.recorder(reduce=False, block_call={})
    run_forward(loaded, ids, call)
    return call.block_call


def call_block(block: torch.nn.Module, hidden: torch.Tensor, call: dict) -> torch.Tensor:
    """One block on (batch, token, d_model) ``hidden`` with a ``block_call``'s mask and positions: its output."""
    args, kwargs = call["args"], call["kwargs"]
    out = block(**kwargs | {"hidden_states": hidden}) if "hidden_states" in kwargs else block(hidden, *args, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _run_block(
    loaded: LoadedModel, ids: list[int], layer: int, start: np.ndarray, recorder: attention.Recorder
) -> None:
    """Block ``layer`` alone on its input ``start``, with what the model passes every block."""
    call, model = block_call(loaded, ids), loaded.model
    hidden = torch.tensor(start, device=model.device, dtype=model.dtype)[None]  # (1, token, d_model), a copy
    with torch.inference_mode(), attention.recording(recorder):
        try:
            call_block(loaded.blocks[layer], hidden, call)
        except attention.StopForward:
            pass


def thumbnails(loaded: LoadedModel, ids: tuple[int, ...] | list[int], size: int = 32) -> np.ndarray:
    """Every head of every layer, max-pooled to at most size x size: (layer, head, rows, cols)."""
    if loaded.family.slow:
        maps, _ = slow.forward(loaded, list(ids), loaded.recorder(reduce=False))
        pooled = [[pool_max(head.cpu().numpy(), size)[0] for head in layer_maps] for layer_maps in maps]
        return _frozen(np.array(pooled, dtype=np.float32))  # (layer, head, rows, cols)
    recorder = loaded.recorder(reduce=False, pool=size)
    run_forward(loaded, list(ids), recorder)
    return _frozen(per_layer(recorder.thumbnails, loaded.info, min(size, len(ids)), min(size, len(ids))))
