"""Query-key geometry of the first token: why every query finds it (Gu et al. 2025).

Keys and queries are read inside the attention function, after the rotary embedding, so the
cosines are the ones the softmax actually sees.
"""

from __future__ import annotations

import numpy as np
import torch

from sinkscope.core import attention, chunked
from sinkscope.core.capture import run_forward
from sinkscope.core.errors import InputError
from sinkscope.core.models import LoadedModel

GEOMETRY = ("first_key_norm", "other_key_norm", "first_key_cosine", "other_key_cosine")


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def layer_geometry(query: torch.Tensor, key: torch.Tensor) -> dict[str, float]:
    """Head means for one layer; query (1, head, query_pos, d), key (1, kv_head, key_pos, d), same positions.

    ``other_key_cosine`` averages cos(q_t, k_j) over the earlier keys 1 <= j <= t of each query t >= 1.
    """
    q = query[0].float()  # (head, query_pos, head_dim)
    k = key[0].float().repeat_interleave(q.shape[0] // key.shape[1], dim=0)  # (head, key_pos, head_dim)
    n_tokens = q.shape[1]
    norms = k.norm(dim=-1)  # (head, key_pos)
    q_unit, k_unit = _unit(q[:, 1:]), _unit(k)  # queries in Q: (head, T - 1, head_dim)
    first = (q_unit * k_unit[:, :1]).sum(-1)  # (head, T - 1): cos(q_t, k_0)
    earlier = k_unit[:, 1:].cumsum(1)  # (head, T - 1, head_dim): sum_{j=1..t} k_j / |k_j|
    counts = torch.arange(1, n_tokens, device=q.device, dtype=q.dtype)  # t keys 1..t for query t
    others = (q_unit * earlier).sum(-1) / counts  # (head, T - 1)
    return {
        "first_key_norm": float(norms[:, 0].mean()),
        # numpy's median (metrics.md): torch.median would return the lower middle value
        "other_key_norm": float(norms[:, 1:].quantile(0.5, dim=-1).mean()) if n_tokens > 1 else float("nan"),
        "first_key_cosine": float(first.mean()),
        "other_key_cosine": float(others.mean()),
    }


def key_geometry(loaded: LoadedModel, ids: list[int] | tuple[int, ...]) -> dict[str, np.ndarray]:
    """Per layer (layer,): the first token's key norm and mean query cosine, against the other keys' (NaN where a
    hybrid's layer has no attention)."""
    if len(ids) < 3:
        raise InputError("error.geometry_tokens")
    found: dict[int, dict[str, float]] = {}

    def attend(
        module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
        mask: torch.Tensor | None, scaling: float | None = None, softcap: float | None = None,
        s_aux: torch.Tensor | None = None,
    ) -> tuple:  # fmt: skip
        found[module.layer_idx] = layer_geometry(query, key)
        return chunked.eager(query, key, value, mask, scaling, softcap, s_aux)

    with attention.overriding(attend):
        run_forward(loaded, list(ids), loaded.recorder(reduce=False))
    none = dict.fromkeys(GEOMETRY, float("nan"))  # a hybrid's layer without attention has no keys
    layers = range(loaded.info.n_layers)
    return {name: np.array([found.get(layer, none)[name] for layer in layers]) for name in GEOMETRY}
