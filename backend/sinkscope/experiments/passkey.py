"""A passkey check beside perplexity: perplexity hides what a compressed cache forgets.

A five-digit number is stated at the start of a long filler text and asked for at its end (the passkey retrieval
test of Mohtashami & Jaggi 2023, which StreamingLLM runs too); a cache is scored by the model's probability of the
right answer, teacher-forced, next to its perplexity on the same text. A sliding cache keeps its fluency and loses
the number once it leaves the window; a quantized cache keeps both where it keeps what matters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sinkscope.core.capture import analyze_ids
from sinkscope.core.errors import InputError
from sinkscope.core.i18n import Message
from sinkscope.core.loss import perplexity
from sinkscope.core.models import LoadedModel, require_loaded
from sinkscope.experiments import kv_evict, kv_quant
from sinkscope.experiments.streaming import dense
from sinkscope.findings.words import RETRIEVES

KEY = "43159"  # the number to retrieve: five digits, one token each in most tokenizers
INTRO = ("There is an important pass key hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz "
         "you about the pass key later. The pass key is {key}. Remember it. {key} is the pass key.")  # fmt: skip
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = " What is the pass key? The pass key is"
LENGTHS = (256, 512)  # tokens of the whole text the page offers
BITS = kv_quant.CLAIM_BITS  # the quantized caches' default bits: where protection matters most
Progress = Callable[[list["PasskeyRow"], int], bool]  # (rows so far, rows asked) -> keep going?


@dataclass(frozen=True)
class Passkey:
    """A passkey text as token ids, and where its answer sits."""

    ids: tuple[int, ...]
    answer: int  # the position of the answer's first token; the answer runs to the end

    def probability(self, nll: np.ndarray) -> float:
        """The probability of the whole answer under per-token NLL of ids[1:] (token t's NLL at t - 1)."""
        return math.exp(-float(np.sum(nll[self.answer - 1 :])))

    def filler_perplexity(self, nll: np.ndarray) -> float:
        """Perplexity of everything before the answer: the fluency the answer's probability is set beside."""
        return perplexity(nll[: self.answer - 1])


def passkey_text(loaded: LoadedModel, n_tokens: int, key: str = KEY) -> Passkey:
    """The longest passkey text of at most ``n_tokens`` tokens: the number, filler, the question, the answer."""
    if require_loaded(loaded).tokenizer is None:
        raise InputError("error.passkey_tokenizer")
    answer = loaded.encode(" " + key, add_bos=False)
    intro, question = (loaded.encode(part, add_bos=False) for part in (INTRO.format(key=key), QUESTION))
    filler = loaded.encode(FILLER, add_bos=False)
    repeats = (n_tokens - len(intro) - len(question) - len(answer)) // len(filler)
    if repeats < 1:
        raise InputError("error.passkey_short", n=n_tokens, least=len(intro) + len(question) + len(answer) + 1)
    prefix = loaded.encode(INTRO.format(key=key) + FILLER * repeats + QUESTION, add_bos=False)
    while len(prefix) + len(answer) > n_tokens:  # the parts joined may tokenize longer than apart
        repeats -= 1
        prefix = loaded.encode(INTRO.format(key=key) + FILLER * repeats + QUESTION, add_bos=False)
    return Passkey(tuple(prefix + answer), len(prefix))


@dataclass(frozen=True)
class PasskeyRow:
    """One cache on the passkey text: "dense", an eviction policy at ``budget``, or a quantized cache."""

    cache: str  # "dense" | an eviction policy | a protection of the BITS-bit cache
    kind: str  # "dense" | "evict" | "quant"
    probability: float  # of the right answer
    perplexity: float  # of the text before the answer

    @property
    def retrieves(self) -> bool:
        return self.probability > RETRIEVES


def passkey_table(
    loaded: LoadedModel, n_tokens: int, budget: int, bits: int = BITS, progress: Progress | None = None
) -> list[PasskeyRow]:
    """The dense cache, the ``bits``-bit cache with each protection (causal, the default residual) and each eviction
    policy at ``budget``, on one passkey text; ``progress`` may stop the run after any step, keeping the rows."""
    text = passkey_text(loaded, n_tokens)
    ids = list(text.ids)
    kv_evict.check_cache(len(ids), budget)

    def row(cache: str, kind: str, nll: np.ndarray) -> PasskeyRow:
        return PasskeyRow(cache, kind, text.probability(nll), text.filler_perplexity(nll))

    rows, total = [row("dense", "dense", dense(loaded, ids))], 2 + len(kv_quant.PROTECTIONS)
    if progress is not None and not progress(rows, total):
        return rows
    sinks = kv_quant.detected_sinks(analyze_ids(loaded, ids))
    for protect in kv_quant.PROTECTIONS:
        kept = kv_quant.protected(protect, len(ids), sinks)
        rows.append(row(protect, "quant", kv_quant.quantized_nll(loaded, ids, bits, kept)))
        if progress is not None and not progress(rows, total):
            return rows
    going = (lambda _nll, _n: progress(rows, total)) if progress is not None else None
    found = kv_evict.evict(loaded, ids, budget, progress=going)
    if found.nll.shape[1] == len(ids) - 1:  # a stream stopped before the answer has no score to give
        rows += [row(policy, "evict", found.nll[lane]) for lane, policy in enumerate(found.policies)]
    return rows


def said(rows: list[PasskeyRow], budget: int) -> Message | None:
    """StreamingLLM's cache against dense: its fluency, and whether it still holds the number."""
    by = {(row.kind, row.cache): row for row in rows}
    if ("dense", "dense") not in by or ("evict", "sinks_window") not in by:
        return None
    base, stream = by["dense", "dense"], by["evict", "sinks_window"]
    return Message.of("passkey.said" if stream.retrieves != base.retrieves else "passkey.said_same",
                      budget=budget, dense_ppl=round(base.perplexity, 2), dense_p=round(base.probability, 3),
                      stream_ppl=round(stream.perplexity, 2), stream_p=stream.probability,
                      retrieves=round(RETRIEVES, 2))  # fmt: skip
