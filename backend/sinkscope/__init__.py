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
    "load_model": "sinkscope.models",
    "LoadedModel": "sinkscope.models",
    "analyze": "sinkscope.capture",
    "analyze_ids": "sinkscope.capture",
    "attention_maps": "sinkscope.capture",
    "thumbnails": "sinkscope.capture",
    "Trace": "sinkscope.capture",
    "LayerMaps": "sinkscope.capture",
    "intervene": "sinkscope.interventions",
    "outcome": "sinkscope.interventions",
    "Outcome": "sinkscope.interventions",
    "DropFirst": "sinkscope.interventions",
    "ForceHeads": "sinkscope.interventions",
    "ReplaceFirst": "sinkscope.interventions",
    "SetActivations": "sinkscope.interventions",
    "Perturb": "sinkscope.interventions",
    "key_geometry": "sinkscope.geometry",
    "streaming_nll": "sinkscope.streaming",
    "perplexity": "sinkscope.streaming",
    "polarize": "sinkscope.lab",
    "train": "sinkscope.toy",
    "TrainingRun": "sinkscope.toy",
    "run_census": "sinkscope.census",
    "CensusRequest": "sinkscope.census",
    "Cluster": "sinkscope.census",
    "SinkscopeError": "sinkscope.errors",
    "InputError": "sinkscope.errors",
    "ModelLoadError": "sinkscope.errors",
    "TokenLimitError": "sinkscope.errors",
    "BUNDLED": "sinkscope.bundled",
    "DEFAULT_MODEL": "sinkscope.bundled",
}
_SUBMODULES = {"plot", "metrics", "names", "interventions", "streaming", "lab", "capture", "models", "i18n", "census",
               "census_stats"}  # fmt: skip
__all__ = sorted(_EXPORTS) + sorted(_SUBMODULES)


def __getattr__(name: str) -> Any:
    """Load an attribute's module on first use, so ``import sinkscope.plot`` stays free of torch."""
    if name in _SUBMODULES:
        return importlib.import_module(f"sinkscope.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sinkscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
