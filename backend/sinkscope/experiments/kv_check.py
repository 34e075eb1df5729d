"""The scoreboard's KV-cache check: H2O's evictions and every head's need of the whole context, on the start of
Python's help at one cache size; one run per model, whatever the visitor's text (the warm start makes it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sinkscope.core.models import LoadedModel
from sinkscope.core.texts import builtin_text
from sinkscope.experiments import kv_evict, kv_heads

TOKENS = 128  # the cache turns over three times; the per-head map costs about half a minute on two cores
BUDGET = 32  # 4 sinks + 28 recent tokens


@dataclass(frozen=True)
class KVCheck:
    """What the scoreboard's two eviction claims read."""

    eviction: kv_evict.Eviction  # h2o and h2o_sinks at BUDGET
    needs: kv_heads.HeadNeeds
    policy: kv_heads.DuoPolicy  # the heads over the threshold kept whole


def check(loaded: LoadedModel, between: Callable[[], None] = lambda: None) -> KVCheck:
    """H2O with and without its sinks protected, then the per-head map and DuoAttention's policy from it (scored on
    the next TOKENS tokens of the help, which the map was not built on);
    ``between`` is called after every token and every layer (the warm start lets visitors in there)."""
    ids = loaded.encode(builtin_text(), TOKENS, truncate=True, add_bos=False)
    step = lambda *_: between() or True  # noqa: E731  (a progress callback that never stops the run)
    eviction = kv_evict.evict(loaded, ids, BUDGET, ("h2o", "h2o_sinks"), progress=step)
    needs = kv_heads.head_needs(loaded, ids, BUDGET, progress=step)
    return KVCheck(eviction, needs, kv_heads.duo_policy(loaded, kv_heads.held_out_ids(loaded, TOKENS), needs))


def values() -> dict[str, int]:
    """The sizes a sentence about the check states."""
    return {"tokens": TOKENS, "cache": BUDGET, "sinks": kv_evict.SINKS}
