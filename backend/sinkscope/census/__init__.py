"""The corpus census on Ray: corpora and their windows, the run, its files, tables and statistics.

``sinkscope.census.run_census`` and the run's records load on first use: the runner imports torch, and a Ray
task that only reads files (``census.corpus``) should not pay for it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CensusRequest", "CensusSummary", "Cluster", "describe", "run_census"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'sinkscope.census' has no attribute {name!r}")
    return getattr(importlib.import_module("sinkscope.census.runner"), name)
