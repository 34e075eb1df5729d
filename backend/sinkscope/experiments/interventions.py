"""Interventions: change one thing inside a forward pass and measure what the model does without it.

Each intervention is a frozen dataclass of plain values (so results cache by it). It may rewrite the
input ids, the pre-softmax scores of chosen layers and heads, cells of the residual stream, or a block's write. The
edits live in a context variable of the calling thread, so the shared model keeps no state::

    with sinkscope.intervene(model, DropFirst(1, layers=tuple(range(2, 30)))):
        broken = sinkscope.analyze(model, text)        # every forward pass in the block is changed

``outcome`` measures one changed run against the text (loss, predictions, head metrics).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from sinkscope.core import attention, chunked, metrics, ranges
from sinkscope.core.capabilities import Can
from sinkscope.core.capture import head_metrics, run_forward
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message
from sinkscope.core.loss import perplexity
from sinkscope.core.models import LoadedModel, ModelInfo, require_loaded
from sinkscope.core.texts import builtin_text
from sinkscope.core.tokens import display_token
from sinkscope.core.writes import WriteEdit

TOP_K = 5


def layer_span(layers: tuple[int, ...]) -> str:
    """'2-29' for a contiguous run, else a comma list."""
    if layers and list(layers) == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2:
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))


class Intervention:
    """No-op defaults: a subclass overrides what it changes. ``message`` names it in any language."""

    edit_scores: attention.ScoreEdit | None = None
    edit_residual: attention.ResidualEdit | None = None
    edit_write: WriteEdit | None = None

    @property
    def message(self) -> Message:
        return Message.of("lesson.intact")

    @property
    def label(self) -> str:
        """The English name, for the command line and notebooks."""
        return self.message.text()

    def input_ids(self, ids: list[int]) -> list[int]:
        return ids

    def fits(self, info: ModelInfo) -> None:
        """An InputError when this change names a layer or head the model does not have."""


def _layers_within(layers: tuple[int, ...], last: int) -> None:
    bad = next((layer for layer in layers if isinstance(layer, bool) or not isinstance(layer, int)
                or not 0 <= layer <= last), None)  # fmt: skip
    if bad is not None:
        raise InputError("error.layer_range", layer=repr(bad), last=last)


@dataclass(frozen=True)
class Together(Intervention):
    """Several interventions in one run: ids, scores and residual edits applied in the given order."""

    parts: tuple[Intervention, ...]

    @property
    def message(self) -> Message:
        return Message.of("iv.together", names=" + ".join(part.label for part in self.parts))

    def fits(self, info: ModelInfo) -> None:
        for part in self.parts:
            part.fits(info)

    def input_ids(self, ids: list[int]) -> list[int]:
        for part in self.parts:
            ids = part.input_ids(ids)
        return ids

    def edit_scores(self, layer: int, scores: torch.Tensor, rows: torch.Tensor) -> None:
        for part in self.parts:
            if part.edit_scores is not None:
                part.edit_scores(layer, scores, rows)

    def edit_residual(self, index: int, hidden: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            if part.edit_residual is not None:
                hidden = part.edit_residual(index, hidden)
        return hidden

    def edit_write(self, block: int, kind: str, write: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            if part.edit_write is not None:
                write = part.edit_write(block, kind, write)
        return write


@contextmanager
def intervene(loaded: LoadedModel, *changes: Intervention) -> Iterator[Intervention]:
    """Apply ``changes`` to every forward pass of ``loaded`` that this thread runs inside the block.

    ``analyze``, ``attention_maps``, ``run`` and a plain ``loaded.model(...)`` call all see them;
    other threads (other app sessions) do not. Inside another ``intervene`` block the changes compose: the
    outer block's apply first, then these (``Together``).
    """
    require_loaded(loaded).require(Can.INTERVENE)
    for change in changes:  # checked against this model before any forward pass runs under them
        if not isinstance(change, Intervention):
            raise InputError("error.not_intervention", value=repr(change)[:60])
        change.fits(loaded.info)
    outer = attention.current_change()
    parts = (outer, *changes) if outer is not None else changes
    change = parts[0] if len(parts) == 1 else Together(tuple(parts))
    with attention.changing(change):
        yield change


@dataclass(frozen=True)
class DropFirst(Intervention):
    """Remove the first ``k`` keys in ``layers``; each row renormalizes over the keys it has left."""

    k: int
    layers: tuple[int, ...]

    def __post_init__(self) -> None:
        ranges.check("drop_first", self.k)  # k = 0 drops nothing; k < 0 would drop every key but the last
        if not self.layers:
            raise InputError("error.no_layers_given")

    def fits(self, info: ModelInfo) -> None:
        _layers_within(tuple(self.layers), info.n_layers - 1)

    @property
    def message(self) -> Message:
        return Message.of("iv.drop", k=self.k, layers=layer_span(self.layers))

    def edit_scores(self, layer: int, scores: torch.Tensor, rows: torch.Tensor) -> None:
        if layer in self.layers:
            # a query that sees only the dropped keys has no distribution left: its row stays as it was
            scores[..., rows >= self.k, : self.k] = chunked.MIN_SCORE  # scores: (kv_head, group, rows, keys)


DROP_FROM = 2  # the first layer the default removal reaches: the break page, course step 5 and the scoreboard alike


def default_drop(n_layers: int) -> DropFirst:
    """The first key removed from every layer from DROP_FROM on (from layer 0 in a model too shallow for that)."""
    return DropFirst(1, tuple(range(min(DROP_FROM, n_layers - 1), n_layers)))


FORCE_KEYS = {"sink": "iv.force_sink", "diagonal": "iv.force_diagonal", "uniform": "iv.force_uniform"}


@dataclass(frozen=True)
class ForceHeads(Intervention):
    """Make chosen (layer, head) pairs attend only to the first token ("sink"), only to themselves
    ("diagonal"), or evenly to every key they can see ("uniform": the densest pattern)."""

    heads: tuple[tuple[int, int], ...]
    to: str

    def __post_init__(self) -> None:
        ranges.check_choice("to", self.to, tuple(FORCE_KEYS))

    def fits(self, info: ModelInfo) -> None:
        _layers_within(tuple(layer for layer, _ in self.heads), info.n_layers - 1)
        bad = next((head for _, head in self.heads if not 0 <= head < info.n_heads), None)
        if bad is not None:
            raise InputError("error.head_range", head=repr(bad), last=info.n_heads - 1)

    @property
    def message(self) -> Message:
        return Message.of(FORCE_KEYS[self.to], n=len(self.heads))

    def edit_scores(self, layer: int, scores: torch.Tensor, rows: torch.Tensor) -> None:
        chosen = [head for at, head in self.heads if at == layer]
        if not chosen:
            return
        n_kv, group, n_rows, n_keys = scores.shape
        per_head = scores.view(n_kv * group, n_rows, n_keys)  # (head, rows, keys): head = kv_head * group + g
        if self.to == "uniform":  # equal scores on every visible key; blocked keys keep their minimum
            visible = per_head[chosen] > chunked.MIN_SCORE / 2
            per_head[chosen] = torch.where(visible, 0.0, chunked.MIN_SCORE)
            return
        target = torch.zeros_like(rows) if self.to == "sink" else rows
        one_hot = torch.full((n_rows, n_keys), chunked.MIN_SCORE, device=scores.device)
        one_hot[torch.arange(n_rows), target] = 0.0
        per_head[chosen] = one_hot


@dataclass(frozen=True)
class SetActivations(Intervention):
    """Hold (token, channel) cells of h^l at fixed values at every layer output from ``from_layer`` on."""

    cells: tuple[tuple[int, int], ...]
    values: tuple[tuple[float, ...], ...] | None  # [l][cell] for h^l; None sets them to zero
    from_layer: int

    def __post_init__(self) -> None:
        ranges.check("from_layer", self.from_layer)

    def fits(self, info: ModelInfo) -> None:
        if self.from_layer > info.n_layers:
            raise InputError("error.layer_range", layer=self.from_layer, last=info.n_layers)

    @property
    def message(self) -> Message:
        key = "iv.massive_zero" if self.values is None else "iv.massive_mean"
        return Message.of(key, n=len(self.cells), layer=self.from_layer)

    def edit_residual(self, index: int, hidden: torch.Tensor) -> torch.Tensor:
        if index < self.from_layer or not self.cells:
            return hidden
        tokens, channels = (list(axis) for axis in zip(*self.cells, strict=True))
        edited = hidden.clone()  # hidden: (1, token, d_model)
        values = 0.0 if self.values is None else torch.tensor(self.values[index]).to(hidden)
        edited[0, tokens, channels] = values
        return edited


@dataclass(frozen=True)
class Perturb(Intervention):
    """Add one fixed random direction of length ``size`` to the embedding h^0 of one token."""

    position: int
    size: float
    seed: int = 0

    def __post_init__(self) -> None:
        ranges.check("size", self.size)
        ranges.check("position", self.position)

    @property
    def message(self) -> Message:
        return Message.of("iv.perturb", position=self.position, size=float(self.size))

    def edit_residual(self, index: int, hidden: torch.Tensor) -> torch.Tensor:
        if index != 0:
            return hidden
        if self.position >= hidden.shape[1]:
            raise InputError("error.past_end", position=self.position, last=hidden.shape[1] - 1)
        return nudged(hidden, self.position, self.size, (self.seed,))


def nudged(hidden: torch.Tensor, at: int, size: float, seeds: tuple[int, ...]) -> torch.Tensor:
    """hidden (row, token, d_model) with row b's token ``at`` moved by ``size`` along the unit direction drawn with
    ``seeds[b]``: ``Perturb``'s one row, or a batch of nudges."""
    drawn = torch.stack([torch.randn(hidden.shape[-1], generator=torch.Generator().manual_seed(s)) for s in seeds])
    edited = hidden.clone()
    edited[:, at] += (size * drawn / drawn.norm(dim=-1, keepdim=True)).to(hidden)  # drawn: (row, d_model)
    return edited


@dataclass(frozen=True)
class ReplaceFirst(Intervention):
    """Put another token in position 0: is the sink about the first position or about that token?"""

    token_id: int
    token: str

    @property
    def message(self) -> Message:
        return Message.of("iv.replace", token=repr(self.token))

    def input_ids(self, ids: list[int]) -> list[int]:
        return [self.token_id, *ids[1:]]


@dataclass(frozen=True)
class Outcome:
    """What one (possibly changed) forward pass did to the text; the intervention's label names it."""

    nll: np.ndarray  # (token - 1,): -ln p(token t+1 | tokens ..t)
    top: tuple[tuple[str, float], ...]  # the likeliest tokens to follow the text, with probabilities
    heads: dict[str, np.ndarray]  # per-head metrics of the changed run, (layer, head)
    token_cosine: np.ndarray  # (layer + 1,), raw residual stream
    token_cosine_scaled: np.ndarray  # (layer + 1,), channels scaled by their RMS: oversmoothing

    @property
    def loss(self) -> float:
        return float(self.nll.mean())

    @property
    def perplexity(self) -> float:
        return perplexity(self.nll)


def _forward(
    loaded: LoadedModel, ids: list[int], change: Intervention | None, measure: bool = True, logits_from: int = 0
) -> tuple[torch.Tensor, attention.Recorder]:
    """Log-probabilities (token, vocab) from ``logits_from`` on, and the recorder, of one run with ``change``.

    ``measure`` also reduces every head and keeps the residual stream; without it attention runs as SDPA.
    """
    if len(ids) < 2:
        raise InputError("error.two_tokens")
    change = change or Intervention()
    recorder = loaded.recorder(reduce=measure, residual=loaded.stream_buffer(len(ids)) if measure else None)
    with intervene(loaded, change):
        logits = run_forward(loaded, change.input_ids(list(ids)), recorder, logits_from=logits_from)
    return torch.log_softmax(logits.float(), dim=-1), recorder


def outcome(loaded: LoadedModel, ids: list[int] | tuple[int, ...], change: Intervention | None = None) -> Outcome:
    """Run the text with ``change`` (or intact) and measure loss, predictions, heads and smoothing."""
    ids = list(ids)
    log_probs, recorder = _forward(loaded, ids, change)
    targets = torch.tensor(ids[1:], device=log_probs.device)
    nll = -log_probs[:-1].gather(-1, targets[:, None])[:, 0]  # (token - 1,)
    best = log_probs[-1].topk(TOP_K)
    top = tuple(
        (display_token(loaded.tokenizer, int(i)) if loaded.tokenizer is not None else str(int(i)), float(p.exp()))
        for p, i in zip(best.values, best.indices, strict=True)
    )
    residual = recorder.residual  # (layer + 1, token, d_model)
    return Outcome(
        nll=nll.cpu().numpy(),
        top=top,
        heads=head_metrics(recorder, loaded.info, len(ids)),
        token_cosine=np.array([metrics.token_cosine(h) for h in residual]),
        token_cosine_scaled=np.array([metrics.token_cosine(h, scaled=True) for h in residual]),
    )


def sensitivity(
    loaded: LoadedModel, ids: list[int] | tuple[int, ...], positions: list[int], size: float
) -> dict[int, float]:
    """Mean KL(intact || perturbed) of the next-token distributions, per perturbed position.

    Only the positions every perturbation can reach (from the last perturbed token on) are averaged,
    so a perturbation of token 0 and one of token p are compared on the same predictions.
    """
    ids = list(ids)
    if max(positions) >= len(ids):
        raise InputError("error.past_end", position=max(positions), last=len(ids) - 1)
    start = max(positions)
    intact, _ = _forward(loaded, ids, None, measure=False, logits_from=start)  # (reached position, vocab)
    result = {}
    for position in positions:
        changed, _ = _forward(loaded, ids, Perturb(position, size), measure=False, logits_from=start)
        kl = (intact.exp() * (intact - changed)).sum(-1)  # (reached position,): KL per prediction
        result[position] = float(kl.mean())
    return result


def embedding_scale(loaded: LoadedModel, ids: list[int] | tuple[int, ...]) -> float:
    """The median norm of the text's h^0: the unit perturbation sizes are given in.

    h^0 is read where the first block receives it, so whatever a family adds to the token embedding (Gemma's
    sqrt(d_model), Granite's multiplier, GPT-2's positions) is in it; the forward stops there.
    """
    recorder = loaded.recorder(reduce=False, residual=loaded.stream_buffer(len(ids)), block_call={})
    run_forward(loaded, list(ids), recorder)
    return float(np.median(np.linalg.norm(recorder.residual[0], axis=-1)))  # numpy's median, as metrics.md says


def massive_cells(massive: tuple[tuple[int, int, int, float], ...]) -> tuple[tuple[int, int], ...]:
    """Every (token, channel) flagged as massive in any layer."""
    return tuple(sorted({(token, channel) for _, token, channel, _ in massive}))


def reference_ids(loaded: LoadedModel, add_bos: bool | None, n_texts: int = 6, length: int = 96) -> list[list[int]]:
    """Short texts other than the user's (Python's own help topics), tokenized like the user's text."""
    paragraphs = [p for p in builtin_text().split("\n\n") if len(p) > 400][:n_texts]
    return [loaded.encode(p, length, truncate=True, add_bos=add_bos) for p in paragraphs]


def massive_means(loaded: LoadedModel, others: list[list[int]], channels: list[int]) -> np.ndarray:
    """(layer + 1, channel): each channel's largest-magnitude entry of h^l, signed, averaged over texts."""
    peaks = []
    for ids in others:
        recorder = loaded.recorder(reduce=False, residual=loaded.stream_buffer(len(ids)))
        run_forward(loaded, ids, recorder)
        h = recorder.residual[:, :, channels]  # (layer + 1, token, channel)
        at = np.abs(h).argmax(1)[:, None]  # (layer + 1, 1, channel): the token where the channel peaks
        peaks.append(np.take_along_axis(h, at, axis=1)[:, 0])
    return np.mean(peaks, axis=0)


def set_massive(
    loaded: LoadedModel,
    massive: tuple[tuple[int, int, int, float], ...],
    mode: str,
    from_layer: int,
    add_bos: bool | None = None,
) -> SetActivations:
    """Zero the flagged massive activations, or set them to their mean over other texts ("zero" | "mean")."""
    cells = massive_cells(massive)
    if mode == "zero" or not cells:
        return SetActivations(cells, None, from_layer)
    channels = [channel for _, channel in cells]
    means = massive_means(loaded, reference_ids(loaded, add_bos), channels)  # (layer + 1, cell)
    return SetActivations(cells, tuple(tuple(map(float, row)) for row in means), from_layer)


def single_token(loaded: LoadedModel, text: str) -> ReplaceFirst:
    """The replacement of the first token by ``text``, which must be exactly one token."""
    ids = loaded.tokenizer.encode(text, add_special_tokens=False) if loaded.tokenizer is not None else []
    if len(ids) != 1:
        raise InputError("error.one_token", text=repr(text), n=len(ids))
    return ReplaceFirst(ids[0], display_token(loaded.tokenizer, ids[0]))


def heads_of_kind(kinds: np.ndarray, kind: str, layers: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(layer, head) of every head labelled ``kind`` in ``layers`` ("all": every head there)."""
    found = zip(*np.nonzero((kinds == kind) | (kind == "all")), strict=True)
    return tuple((int(layer), int(head)) for layer, head in found if layer in layers)


def random_word(tokenizer: object, seed: int) -> str:
    """A whole word that is one token of this vocabulary (leading space included), drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    for token_id in rng.integers(0, len(tokenizer), size=2000):
        text = tokenizer.decode([int(token_id)])
        if len(text) >= 5 and text[0] == " " and text[1:].isalpha() and text[1:].islower():
            return text
    return " the"
