"""The slow path: a family that computes attention inside its own modules (``families.slow``) is measured from the
weights its eager forward returns (``output_attentions=True``), exact against eager by construction.

Every metric of the fast path comes from those maps and each head's values, read where the family computes them,
except ``withheld``, which needs the pre-softmax scores the family never hands out (NaN). One forward holds every
layer's maps at once, so the token limit is what fits in ``MAP_BYTES``; interventions, which edit the scores inside
Sinkscope's kernel, are refused.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np
import torch

from sinkscope.core import attention, metrics
from sinkscope.core.reduce import output_gram, projected_norms, value_norms

MAP_BYTES = 1 << 30  # every layer's float32 maps of one forward together


def token_limit(config: Any, limit: int) -> int:
    """The most tokens whose maps (layer, head, T, T) fit in MAP_BYTES, under the model's own ``limit``."""
    text = config.get_text_config()
    return min(limit, math.isqrt(MAP_BYTES // (4 * text.num_hidden_layers * text.num_attention_heads)))


def forward(loaded: Any, ids: list[int], recorder: attention.Recorder) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One eager forward (the residual hooks fill ``recorder``): each layer's maps (head, query_pos, key_pos) and
    values (token, head, head_dim)."""
    family, n_heads = loaded.family, loaded.info.n_heads
    values: list[torch.Tensor] = []
    attentions = [family.attention_of(block) for block in loaded.blocks]

    def keep(attention: torch.nn.Module, _module: torch.nn.Module, _args: tuple, output: torch.Tensor) -> None:
        values.append(family.split_values(output[0], attention, n_heads))

    hooks = [a.get_submodule(family.values).register_forward_hook(partial(keep, a)) for a in attentions]
    try:
        with torch.inference_mode(), attention.recording(recorder):
            output = loaded.model(input_ids=torch.tensor([ids], device=loaded.model.device), output_attentions=True,
                                  use_cache=False)  # fmt: skip
    finally:
        for hook in hooks:
            hook.remove()
    return [maps[0].float() for maps in output.attentions], values


def layer_measures(loaded: Any, layer: int, maps: torch.Tensor, values: torch.Tensor) -> dict[str, np.ndarray]:
    """One layer's per-row measures: value norms (head, key_pos) and head output norms (head, query_pos)."""
    n_heads = maps.shape[0]
    w_o = loaded.family.output_weight(loaded.family.attention_of(loaded.blocks[layer])).detach()  # (d_model, h * d)
    value = values.float().transpose(0, 1)[None]  # (1, head, key_pos, head_dim)
    norms = value_norms(w_o, value, n_heads).reshape(n_heads, -1)  # (head, key_pos)
    mixed = maps @ value[0]  # (head, query_pos, head_dim): each head's output before W_O
    outputs = projected_norms(mixed, output_gram(w_o, n_heads, value.shape[-1]))  # (head, query_pos)
    return {"value_norms": norms.cpu().numpy(), "output_norms": outputs.cpu().numpy()}


def head_metrics(loaded: Any, maps: list[torch.Tensor], values: list[torch.Tensor]) -> dict[str, np.ndarray]:
    """Per-head metrics of every layer (layer, head), as the fast path's ``capture.head_metrics`` gives them."""
    config = loaded.model.config
    windows = [loaded.family.sliding_window(config) if sliding else None
               for sliding in loaded.family.sliding_layers(config)]  # fmt: skip
    rows = []
    for layer, (layer_maps, layer_values) in enumerate(zip(maps, values, strict=True)):
        measured = layer_measures(loaded, layer, layer_maps, layer_values)
        scores = metrics.head_scores(layer_maps.cpu().numpy(), measured["value_norms"], windows[layer])
        norms = measured["value_norms"]
        scores["value_norm_ratio"] = norms[:, 0] / np.median(norms[:, 1:], axis=-1) if norms.shape[1] > 1 else \
            np.full(len(norms), np.nan)  # fmt: skip
        scores["withheld"] = np.full(len(norms), np.nan)  # softmax+1 needs the scores the family keeps to itself
        scores["output_norm"] = measured["output_norms"][:, 1:].mean(-1)
        rows.append(scores)
    heads = {name: np.stack([row[name] for row in rows]) for name in rows[0]}  # (layer, head)
    heads["kind"] = metrics.head_kinds(heads["sink"], heads["diagonal"], heads["previous_token"])
    return heads
