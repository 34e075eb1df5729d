"""Sinkscope: see attention sinks in a real language model. Never imports Streamlit.

Load a model (a bundled key, a hub id or a local directory), analyze a text in one forward pass,
and read per-head and per-layer metrics (defined in docs/metrics.md)::

    >>> import sinkscope
    >>> model = sinkscope.load_model("smollm2-135m")
    >>> trace = sinkscope.analyze(model, "The capital of France is Paris. The capital of Italy is")
    >>> trace.shape                                    # (layers, heads)
    (30, 9)
    >>> heads = trace.to_pandas()                      # one row per head: sink, diagonal, ..., kind
    >>> bool(heads["sink"].max() > 0.9)                # some head parks nearly all its attention on token 0
    True
    >>> maps = sinkscope.attention_maps(model, trace.token_ids, layer=15)  # one layer, recomputed exactly
    >>> maps.weights.shape[1:] == (trace.n_tokens, trace.n_tokens)        # (head, query_pos, key_pos)
    True

Interventions apply to every forward pass inside a ``with`` block, in this thread only::

    >>> with sinkscope.intervene(model, sinkscope.DropFirst(1, layers=tuple(range(2, 30)))):
    ...     dropped = sinkscope.analyze(model, "The capital of France is Paris. The capital of Italy is")
    >>> float(dropped.heads["sink"][2:].max())         # no head in layers 2-29 can read token 0 any more
    0.0

Where a sink is made: ``trace.key_sink`` (layer, key) is the attention each key receives; ``secondary_sinks(trace)``,
``first_writes(trace)`` (which block builds the first token's massive activation), ``remove_write`` and
``qk_attribution(model, trace.token_ids, layer, head)`` (a head's score on key 0 and its margin over the other keys,
one term per residual component) and ``linear_check`` (that split's prediction for a removed write beside a real run).

The KV-cache lab: ``quantized_table(model, trace)`` (KIVI's causal quantized cache with its residual window, with
and without the sinks in full precision; ``residual=None`` for the old non-causal bound), ``mean_difference`` (a
bootstrap interval of two caches' loss gap), ``passkey_table(model, n_tokens, budget)`` (a number stated early:
each cache's probability of it beside its perplexity), ``evict(model, ids, budget)`` (window, sinks + window, H2O,
H2O with its sinks kept, as lanes of one batch), ``head_needs(model, ids, budget)`` (every head alone restricted
to sinks + window, exactly), ``estimate_needs`` / ``confirm_needs`` (the same estimated to first order from one
forward and one backward, then exact where the estimate cannot place a head), ``duo_policy`` / ``policy_curve``
(DuoAttention's cache built from it) and ``sink_heads(model, ids)`` (which heads' sinks matter: each head alone
without its first key).

A census of a whole corpus runs on Ray (``sinkscope.run_census``; ``sinkscope census`` on the command line).

Figures (``sinkscope.plot``) take these arrays and return Plotly figures; importing them, the
metrics or the command line loads no torch. Attributes load on first use.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# OpenMP threads that sleep while they wait instead of spinning: with spinning, a forward on every core runs two to
# three times slower as soon as anything else takes a core (a browser, another visitor); idle, it costs nothing
# (bench_analyze --load). Read once, when torch loads: set here, before any module of ours imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_EXPORTS = {
    "load_model": "sinkscope.core.models",
    "LoadedModel": "sinkscope.core.models",
    "analyze": "sinkscope.core.capture",
    "analyze_ids": "sinkscope.core.capture",
    "attention_maps": "sinkscope.core.capture",
    "thumbnails": "sinkscope.core.capture",
    "Trace": "sinkscope.core.capture",
    "LayerMaps": "sinkscope.core.capture",
    "intervene": "sinkscope.experiments.interventions",
    "outcome": "sinkscope.experiments.interventions",
    "Outcome": "sinkscope.experiments.interventions",
    "DropFirst": "sinkscope.experiments.interventions",
    "ForceHeads": "sinkscope.experiments.interventions",
    "ReplaceFirst": "sinkscope.experiments.interventions",
    "SetActivations": "sinkscope.experiments.interventions",
    "Perturb": "sinkscope.experiments.interventions",
    "key_geometry": "sinkscope.experiments.geometry",
    "qk_attribution": "sinkscope.experiments.qk",
    "remove_write": "sinkscope.experiments.writes",
    "first_writes": "sinkscope.experiments.writes",
    "RemoveWrite": "sinkscope.experiments.writes",
    "make_sink": "sinkscope.experiments.elsewhere",
    "MakeSink": "sinkscope.experiments.elsewhere",
    "secondary_sinks": "sinkscope.findings.origins",
    "streaming_nll": "sinkscope.experiments.streaming",
    "perplexity": "sinkscope.core.loss",
    "quantized_table": "sinkscope.experiments.kv_quant",
    "quantized_nll": "sinkscope.experiments.kv_quant",
    "evict": "sinkscope.experiments.kv_evict",
    "passkey_table": "sinkscope.experiments.passkey",
    "mean_difference": "sinkscope.core.loss",
    "linear_check": "sinkscope.experiments.qk",
    "head_needs": "sinkscope.experiments.kv_heads",
    "estimate_needs": "sinkscope.experiments.kv_heads",
    "confirm_needs": "sinkscope.experiments.kv_heads",
    "sink_heads": "sinkscope.experiments.sink_heads",
    "duo_policy": "sinkscope.experiments.kv_heads",
    "policy_curve": "sinkscope.experiments.kv_heads",
    "polarize": "sinkscope.lab.polarization",
    "train": "sinkscope.lab.toy",
    "TrainingRun": "sinkscope.lab.toy",
    "run_census": "sinkscope.census.runner",
    "CensusRequest": "sinkscope.census.runner",
    "Cluster": "sinkscope.census.runner",
    "SinkscopeError": "sinkscope.core.errors",
    "InputError": "sinkscope.core.errors",
    "ModelLoadError": "sinkscope.core.errors",
    "TokenLimitError": "sinkscope.core.errors",
    "BUNDLED": "sinkscope.core.bundled",
    "DEFAULT_MODEL": "sinkscope.core.bundled",
}
_SUBMODULES = {
    "plot": "sinkscope.plot",
    "metrics": "sinkscope.core.metrics",
    "names": "sinkscope.core.names",
    "capture": "sinkscope.core.capture",
    "models": "sinkscope.core.models",
    "i18n": "sinkscope.core.i18n",
    "interventions": "sinkscope.experiments.interventions",
    "streaming": "sinkscope.experiments.streaming",
    "lab": "sinkscope.lab",
    "census": "sinkscope.census",
    "census_stats": "sinkscope.census.stats",
}  # the public names of the modules a user reads, wherever they live in the package
__all__ = sorted(_EXPORTS) + sorted(_SUBMODULES)


def __getattr__(name: str) -> Any:
    """Load an attribute's module on first use, so ``import sinkscope.plot`` stays free of torch."""
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sinkscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
