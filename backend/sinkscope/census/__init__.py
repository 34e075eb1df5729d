"""The corpus census on Ray: corpora and their windows, the run, its files, tables and statistics."""

from sinkscope.census.runner import CensusRequest, CensusSummary, Cluster, describe, run_census

__all__ = ["CensusRequest", "CensusSummary", "Cluster", "describe", "run_census"]
