"""What a figure or a verdict is computed on when it is not the visitor's text: one sentence each, its sizes taken
from the run that made it, so a page never says "on this model and this text" over something else."""

from __future__ import annotations

from sinkscope.core.i18n import Message


def builtin(tokens: int) -> Message:
    """The first ``tokens`` tokens of Python's help: a long text, the same for every visitor."""
    return Message.of("source.builtin", tokens=tokens)


def builtin_held_out(tokens: int) -> Message:
    """Python's help from token ``tokens`` on, as many again: where a policy built on the first ones is scored."""
    return Message.of("source.builtin_held_out", tokens=tokens, end=2 * tokens)


def own_text(tokens: int) -> Message:
    """The first ``tokens`` tokens of the visitor's own text (said where a page could also have used Python's help)."""
    return Message.of("source.own_text", tokens=tokens)


def synthetic(dim: int) -> Message:
    """A sweep over random unit embeddings in ``dim`` dimensions, no model at all."""
    return Message.of("source.synthetic", d=dim)


def lab_runs(runs: int) -> Message:
    """Tiny transformers trained in the training lab."""
    return Message.of("source.lab", runs=runs)


def typed_scores() -> Message:
    """A row of scores the visitor types."""
    return Message.of("source.typed")


def corpus() -> Message:
    """A census over a corpus of many texts."""
    return Message.of("source.corpus")


def toy_block() -> Message:
    """The value-softmax block the lab trains: a few weights, no model."""
    return Message.of("source.toy_block")
