"""What each block adds to the residual stream: its attention write and its MLP write (docs/metrics.md, "Where
attention goes, and where a sink is made").

Block ``b`` (the head map's layer b) reads h^b and writes h^(b+1) = h^b + a + m (a parallel-residual block reads h^b
for both). Hooks on each block's two writes (``core.hooks``, installed once per model with the residual hooks) let
the calling thread's intervention replace a write (``edit_write``) and copy into its recorder's ``Writes``: both
writes at position 0, and per token the MLP write's norm and its cosine with the first token's new state
h^(b+1)[0].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from sinkscope.core.families import Family
from sinkscope.core.names import WRITE_PARTS

PARTS = WRITE_PARTS
ADDS_UP = 1e-2  # relative: rounding (bfloat16 included) stays far under it; a block that rescales the stream does not
WriteEdit = Callable[[int, str, torch.Tensor], torch.Tensor]  # (block, part, write (row, token, d_model)) -> instead


@dataclass
class Writes:
    """The writes of one forward pass, per block (n_blocks, ...), float32; NaN where a block did not write."""

    first: np.ndarray  # (part, block, d_model): a[0] and m[0], the writes at position 0
    mlp_norm: np.ndarray  # (block, token): ||m[t]||
    mlp_cos_first: np.ndarray  # (block, token): cos(m[t], h^(b+1)[0]), the first token's state after the block
    _pending: dict[int, torch.Tensor] = field(default_factory=dict)  # block -> its MLP write until h^(b+1) is known

    @staticmethod
    def empty(n_blocks: int, n_tokens: int, d_model: int) -> Writes:
        return Writes(
            np.full((len(PARTS), n_blocks, d_model), np.nan, dtype=np.float32),
            np.full((n_blocks, n_tokens), np.nan, dtype=np.float32),
            np.full((n_blocks, n_tokens), np.nan, dtype=np.float32),
        )

    def keep(self, block: int, part: str, write: torch.Tensor) -> None:
        """write: (1, token, d_model), as the block adds it."""
        row = write[0].float()  # (token, d_model)
        self.first[PARTS.index(part), block] = row[0].cpu().numpy()
        if part == "mlp":
            self.mlp_norm[block] = row.norm(dim=-1).cpu().numpy()
            self._pending[block] = row

    def close(self, block: int, state: torch.Tensor) -> None:
        """The block's output h^(b+1) (token, d_model) is known: the MLP write's cosine with its first token."""
        row = self._pending.pop(block, None)
        if row is not None:
            first = state[0].float()
            cos = row @ first / (row.norm(dim=-1) * first.norm()).clamp_min(1e-30)  # (token,)
            self.mlp_cos_first[block] = cos.cpu().numpy()

    def adds_up(self, residual: np.ndarray) -> bool:
        """Whether h^0[0] plus each block's two writes gives every h^l[0] of ``residual`` (layer + 1, token, d_model):
        a block that rescales the stream (a post-norm block) adds something else than these writes."""
        steps = np.nan_to_num(self.first).sum(0)  # (block, d_model): what each block adds to the first token
        rebuilt = residual[0, 0] + np.cumsum(steps.astype(np.float64), axis=0)  # h^1[0] .. h^L[0]
        states = residual[1:, 0]
        gap = np.linalg.norm(rebuilt - states, axis=-1) / np.maximum(np.linalg.norm(states, axis=-1), 1e-30)
        return bool(np.isfinite(self.first).all() and gap.max() <= ADDS_UP)

    def frozen(self) -> Writes:
        """The same writes, read-only (a Trace's)."""
        for array in (self.first, self.mlp_norm, self.mlp_cos_first):
            array.flags.writeable = False
        return self

    @property
    def attn_write(self) -> np.ndarray:
        """(block,): ||a[0]||, the norm of what attention adds to the first token."""
        return np.linalg.norm(self.first[0], axis=-1)

    @property
    def mlp_write(self) -> np.ndarray:
        """(block,): ||m[0]||."""
        return np.linalg.norm(self.first[1], axis=-1)


def write_modules(block: torch.nn.Module, family: Family) -> dict[str, torch.nn.Module] | None:
    """The modules whose outputs a block adds to the stream, by part; None when the block has no such pair (a
    hybrid's Mamba layer, a family whose MLP is not one module)."""
    paths = {"attention": family.attention_write or family.attention, "mlp": family.mlp_write}
    try:
        return {part: block.get_submodule(path) for part, path in paths.items()}
    except AttributeError:
        return None
