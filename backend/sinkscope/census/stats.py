"""What the census page shows, from a census heads table (one row per model, length, window, layer, head).

Documents are the unit of the confidence intervals: a document's windows share its text, so the sink rate is
averaged per document first and the bootstrap resamples documents. pandas and numpy only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sinkscope.core.names import DEFAULT_EPS, KINDS

GROUP = ["model", "length"]
BOOTSTRAP = 1000


def document_rates(heads: pd.DataFrame, eps: float = DEFAULT_EPS) -> pd.DataFrame:
    """Sink^eps (percent of heads) of every window, averaged over each document's windows."""
    windows = heads.assign(sinks=heads["sink"] > eps).groupby([*GROUP, "doc_id", "start"], observed=True)["sinks"]
    per_window = (100 * windows.mean()).rename("rate").reset_index()
    return per_window.groupby([*GROUP, "doc_id"], observed=True)["rate"].mean().reset_index()


LEVEL = 0.95  # the bootstrap interval of a mean over documents
WHISKERS = (5, 95)  # the percentiles a spread's whiskers reach
STEADY = 0.9  # a head that sinks in more than this share of documents is a steady sink


def bootstrap_interval(values: np.ndarray, rng: np.random.Generator, level: float = LEVEL) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean."""
    if len(values) < 2:
        return float(values.mean()), float(values.mean())
    means = values[rng.integers(0, len(values), size=(BOOTSTRAP, len(values)))].mean(1)  # (resample,)
    return tuple(float(q) for q in np.quantile(means, [(1 - level) / 2, (1 + level) / 2]))


def rate_by_length(heads: pd.DataFrame, eps: float = DEFAULT_EPS, seed: int = 0) -> pd.DataFrame:
    """Per model and length: mean sink rate over documents, its 95% bootstrap interval, and how many documents."""
    rng = np.random.default_rng(seed)
    rows = []
    for (model, length), group in document_rates(heads, eps).groupby(GROUP, observed=True):
        low, high = bootstrap_interval(group["rate"].to_numpy(), rng)
        rows.append({"model": model, "length": length, "rate": group["rate"].mean(), "low": low, "high": high,
                     "docs": len(group)})  # fmt: skip
    return pd.DataFrame(rows, columns=[*GROUP, "rate", "low", "high", "docs"])


def sink_by_layer(heads: pd.DataFrame) -> pd.DataFrame:
    """Mean sink score per model, length and layer."""
    return heads.groupby([*GROUP, "layer"], observed=True)["sink"].mean().reset_index()


def sink_spread(heads: pd.DataFrame, model: str, length: int) -> pd.DataFrame:
    """Quartiles and 5/95th percentiles of every per-head sink score (all windows) in each layer."""
    chosen = heads[(heads["model"] == model) & (heads["length"] == length)]
    low, high = WHISKERS
    quantiles = chosen.groupby("layer")["sink"].quantile([low / 100, 0.25, 0.5, 0.75, high / 100]).unstack()
    return quantiles.set_axis(["p5", "q1", "median", "q3", "p95"], axis=1).reset_index()


def kinds_by_layer(heads: pd.DataFrame, model: str, length: int) -> pd.DataFrame:
    """Share of heads of each kind in every layer, over all windows: (layer) rows x KINDS columns."""
    chosen = heads[(heads["model"] == model) & (heads["length"] == length)]
    shares = pd.crosstab(chosen["layer"], chosen["kind"], normalize="index")
    return shares.reindex(columns=list(KINDS), fill_value=0.0)


def steady_sinks(heads: pd.DataFrame, eps: float = DEFAULT_EPS, share: float = STEADY) -> pd.DataFrame:
    """Heads whose sink score is above eps in more than ``share`` of the documents (a document's windows
    averaged first), with that share and their mean sink, strongest first."""
    per_doc = heads.groupby([*GROUP, "layer", "head", "doc_id"], observed=True)["sink"].mean().reset_index()
    per_head = per_doc.assign(sinks=per_doc["sink"] > eps).groupby([*GROUP, "layer", "head"], observed=True)
    table = per_head.agg(docs_share=("sinks", "mean"), sink=("sink", "mean")).reset_index()
    steady = table[table["docs_share"] > share]
    return steady.sort_values(["model", "length", "docs_share", "sink"], ascending=[True, True, False, False])
