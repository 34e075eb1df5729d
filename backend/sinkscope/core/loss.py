"""How well a model predicts a text, in one implementation: each token's negative log-likelihood, and perplexity.
Streaming, the KV-cache lab, the lessons, the claims and the course all read it from here."""

from __future__ import annotations

import math

import numpy as np
import torch


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Negative log-likelihood of each target under (position, vocab) logits."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return (-log_probs.gather(-1, targets[:, None])[:, 0]).cpu().numpy()


def perplexity(nll: np.ndarray) -> float:
    """exp of the mean NLL over the last axis' tokens; NaN for no token (nothing was predicted)."""
    nll = np.asarray(nll, dtype=np.float64)
    return float(math.exp(float(nll.mean()))) if nll.size else float("nan")
