"""Which heads' sinks matter: the loss change when one head alone loses its first key (DropFirst on that head only),
estimated for every head from one forward and one backward, and measured exactly for the heads the estimate ranks
highest."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sinkscope.core import ranges
from sinkscope.core.capabilities import Can
from sinkscope.core.errors import InputError, SinkscopeError
from sinkscope.core.i18n import Message
from sinkscope.core.models import LoadedModel, check_ids, require_loaded
from sinkscope.experiments import head_effects

TOP = 12  # heads measured exactly: the ones the estimate ranks highest


@dataclass(frozen=True)
class SinkHeads:
    """Per head, the change of the text's mean next-token loss when it alone cannot read the first token."""

    cells: head_effects.Cells

    @property
    def change(self) -> np.ndarray:
        return self.cells.change  # (layer, head), nats

    @property
    def estimated(self) -> np.ndarray:
        return self.cells.estimated  # (layer, head) bool

    def strongest(self) -> tuple[int, int]:
        """The (layer, head) whose sink matters most among those measured exactly (any head, if none is)."""
        exact = np.where(self.estimated, np.nan, self.change)
        shown = exact if np.isfinite(exact).any() else self.change
        layer, head = np.unravel_index(np.nanargmax(shown), shown.shape)
        return int(layer), int(head)


def refusal(loaded: LoadedModel, n_tokens: int) -> SinkscopeError | None:
    """Why the map cannot be measured with this model on a text of ``n_tokens``, or None: it edits each head's mask
    as the KV lab does (a model the lab refuses, it refuses too), and a loss needs a token to predict."""
    return loaded.refusal(Can.EVICT_KV) or (InputError("error.two_tokens") if n_tokens < 2 else None)


def sink_heads(loaded: LoadedModel, ids: list[int], top: int = TOP, progress: head_effects.Progress | None = None,
               pause: head_effects.Pause | None = None) -> SinkHeads:  # fmt: skip
    """Every head's estimated loss change without its first key, then the exact change for the ``top`` heads the
    estimate ranks highest (``progress`` may stop after any unit, keeping what it measured; ``pause`` runs between
    blocks)."""
    check_ids(require_loaded(loaded), ids)
    ranges.check("top", top)
    loaded.check_length(len(ids))  # the one token limit a text meets, before any work
    refused = refusal(loaded, len(ids))
    if refused is not None:
        raise refused
    allowed = head_effects.without_first_key(len(ids))
    first = head_effects.estimate(loaded, ids, allowed, margin=0.0)  # ranked, not placed against a threshold
    ranked = np.argsort(-np.nan_to_num(first.change, nan=-np.inf), axis=None)[:top]
    chosen = np.zeros(first.change.shape, dtype=bool)
    chosen.flat[ranked] = True
    return SinkHeads(head_effects.exact(loaded, ids, allowed, first, chosen, progress, pause))


def said(found: SinkHeads) -> Message:
    """Which head's sink matters most, by how much, and how many cells are exact."""
    layer, head = found.strongest()
    change = float(found.change[layer, head])
    return Message.of("break.sink_heads_said", layer=layer, head=head, ratio=round(float(np.exp(change)), 3),
                      exact=int((~found.estimated & np.isfinite(found.change)).sum()),
                      estimated=int(found.estimated.sum()))  # fmt: skip
