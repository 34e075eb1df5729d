"""Every metric name and head kind, defined once: what shared code, exports and figures refer to.

Definitions are in docs/metrics.md; ``title`` is the catalogue key of the name a person reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Kind(StrEnum):
    """A head's label (docs/metrics.md): the largest of three scores when it is >= 0.5, else mixed."""

    SINK = "sink"
    DIAGONAL = "diagonal"
    PREVIOUS_TOKEN = "previous_token"
    MIXED = "mixed"


KINDS: tuple[str, ...] = tuple(Kind)
NO_ATTENTION = "none"  # the kind of a hybrid's layer without attention (Mamba, linear attention): no head to label
LABELLED_KINDS: tuple[str, ...] = (Kind.SINK, Kind.DIAGONAL, Kind.PREVIOUS_TOKEN)  # the scores a kind is read from
KIND_THRESHOLD = 0.5
DEFAULT_EPS = 0.3  # Gu et al. 2025's sink-rate threshold


@dataclass(frozen=True)
class Metric:
    """One named number: per head (layer, head) or per residual-stream layer (h^0 .. h^L)."""

    name: str
    scope: Literal["head", "layer"]
    exported: bool  # a column of the CLI's CSV files and of ``Trace.to_pandas``
    title: str | None = None  # catalogue key of its plain-language title, where a figure shows one


HEAD = (
    Metric("sink", "head", True, "metric.sink"),
    Metric("diagonal", "head", True, "metric.diagonal"),
    Metric("previous_token", "head", True, "metric.previous_token"),
    Metric("entropy", "head", True, "metric.entropy"),
    Metric("value_sink", "head", True, "metric.value_sink"),
    Metric("learned_sink", "head", True, "metric.learned_sink"),  # the mass a learned sink logit takes (gpt-oss)
    Metric("value_norm_ratio", "head", False),
    Metric("withheld", "head", False, "metric.withheld"),  # the mass softmax+1 would leave unread
    Metric("output_norm", "head", False),  # mean ||head output W_O^h|| over Q
)
LAYER = (
    Metric("top1", "layer", True),
    Metric("top2", "layer", True),
    Metric("top3", "layer", True),
    Metric("median_abs", "layer", True),
    Metric("massive", "layer", True),
    Metric("first_norm_ratio", "layer", True),
    Metric("token_cosine", "layer", True),
    Metric("token_cosine_scaled", "layer", True),
    Metric("bos_cosine", "layer", True),
    Metric("bos_cosine_raw", "layer", True),
)
HEAD_METRICS: tuple[str, ...] = tuple(m.name for m in HEAD if m.exported)
LAYER_METRICS: tuple[str, ...] = tuple(m.name for m in LAYER)
HEAD_COLUMNS: tuple[str, ...] = ("layer", "head", *HEAD_METRICS, "kind")
LAYER_COLUMNS: tuple[str, ...] = ("layer", *LAYER_METRICS)
KEY_COLUMNS: tuple[str, ...] = ("layer", "position", "token", "key_sink")
WRITE_PARTS = ("attention", "mlp")  # what a block adds to the residual stream (core.writes)
TITLES: dict[str, str] = {m.name: m.title for m in HEAD if m.title}
STREAM_METHODS: tuple[str, ...] = ("dense", "window", "sinks", "recompute", "mask-window", "mask-sinks")
POLARIZE_VARIANTS: tuple[str, ...] = ("softmax", "softmax+1", "sigmoid", "relu", "linear")  # lab polarize
TASK_VARIANTS: tuple[str, ...] = ("softmax", "softmax+1", "sigmoid", "linear", "sink-logit", "gated")  # lab tasks
LAB_TASKS: tuple[str, ...] = ("backcopy", "induction")  # sinkscope.lab.tasks, the default first
COST_LENGTHS: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)  # the T of sinkscope.experiments.cost's sweep
STATUSES = ("reproduces", "partly", "differs", "not_measured")  # a claim's verdict (experiments.verdicts)
STATUS_KEYS = {"reproduces": "claims.reproduces", "partly": "claims.partly", "differs": "claims.differs",
               "not_measured": "claims.not_measured"}  # fmt: skip  # the catalogue key of each verdict's word
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda", "mps")


PROTECT_KEYS = {"none": "kv.protect_none", "first4": "kv.protect_first4", "sinks": "kv.protect_sinks"}  # KV lab
POLICY_KEYS = {"window": "kv.policy_window", "sinks_window": "kv.policy_sinks_window", "h2o": "kv.policy_h2o",
               "h2o_sinks": "kv.policy_h2o_sinks"}  # fmt: skip  # the KV lab's eviction policies
