"""Synthetic tasks for the training lab, each marking the queries where attention has a job.

A head parks its attention on BOS where it has nothing to do (Guo et al. 2024): every batch says which
queries are *active* (the answer needs the context) and which are *dormant*, so sinks are measured where
they form. Token 0 is BOS in every task.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

BOS = 0
IGNORE = -100  # a position the loss does not score


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor  # (batch, pos) token ids, BOS first
    targets: torch.Tensor  # (batch, pos) the next token to predict, IGNORE where the loss does not look
    active: torch.Tensor  # (batch, pos) bool: queries whose answer needs the context


@dataclass(frozen=True)
class Induction:
    """Varre et al.: BOS, 10 distinct tokens, one of them repeated; predict what followed it (last query only)."""

    vocab: int = 50
    length: int = 12
    name: str = "induction"

    def batch(self, size: int, generator: torch.Generator) -> Batch:
        distinct = self.length - 2
        body = torch.stack([torch.randperm(self.vocab - 1, generator=generator)[:distinct] + 1 for _ in range(size)])
        pick = torch.randint(0, distinct - 1, (size,), generator=generator)  # not the last: it has a successor
        rows = torch.arange(size)
        inputs = torch.cat([torch.full((size, 1), BOS), body, body[rows, pick][:, None]], dim=1)  # (batch, pos)
        targets = torch.full_like(inputs, IGNORE)
        targets[:, -1] = body[rows, pick + 1]
        return Batch(inputs, targets, targets != IGNORE)  # the loss sees only the last query


@dataclass(frozen=True)
class Backcopy:
    """Bigram-Backcopy (Guo et al. 2024): a fixed random bigram chain; after a trigger, copy the token before it.

    Full next-token loss; the attention head has a job only at trigger queries.
    """

    vocab: int = 33  # BOS + 32 tokens
    length: int = 32
    triggers: int = 3
    data_seed: int = 0
    name: str = "backcopy"

    def chain(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(transition probabilities (token, next token), trigger ids): fixed by ``data_seed``."""
        rng = np.random.default_rng(self.data_seed)
        rows = torch.tensor(rng.dirichlet(np.full(self.vocab - 1, 0.3), size=self.vocab - 1), dtype=torch.float32)
        triggers = torch.tensor(rng.permutation(self.vocab - 1)[: self.triggers] + 1)
        return rows, triggers

    def batch(self, size: int, generator: torch.Generator) -> Batch:
        rows, triggers = self.chain()
        plain = torch.ones(self.vocab - 1)
        plain[triggers - 1] = 0  # the first token is not a trigger: it would copy BOS
        tokens = torch.zeros(size, self.length, dtype=torch.long)  # (batch, pos), BOS at 0
        tokens[:, 1] = torch.multinomial(plain.expand(size, -1), 1, generator=generator)[:, 0] + 1
        for pos in range(2, self.length):
            drawn = torch.multinomial(rows[tokens[:, pos - 1] - 1], 1, generator=generator)[:, 0] + 1
            copy = torch.isin(tokens[:, pos - 1], triggers)
            tokens[:, pos] = torch.where(copy, tokens[:, pos - 2], drawn)
        return next_token_batch(tokens, torch.isin(tokens, triggers))


def next_token_batch(tokens: torch.Tensor, active: torch.Tensor) -> Batch:
    """A full next-token loss over (batch, pos) tokens: the last position has no target."""
    targets = torch.full_like(tokens, IGNORE)
    targets[:, :-1] = tokens[:, 1:]
    return Batch(tokens, targets, active & (targets != IGNORE))


TASKS = {"backcopy": Backcopy(), "induction": Induction()}  # the order of names.LAB_TASKS
