"""The figures a class needs from one text: the head map, the kind counts, the depth profile, the strongest sink
head's and diagonal head's maps, and where the sink is made: the key map past the first token, the first token's
writes and, given, the strongest sink head's QK terms (``sinkscope.plot.export`` writes them with their captions)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from sinkscope.core.i18n import Text
from sinkscope.core.tokens import token_labels
from sinkscope.findings.heads import Head, strongest
from sinkscope.plot.explore_figures import fig_attention, fig_depth_profile, fig_head_map, fig_kind_counts
from sinkscope.plot.origins_figures import fig_first_writes, fig_key_map, fig_qk_terms

QK_TERMS = 8  # the QK terms drawn one by one on a slide; the rest are summed

TITLES = {"sink": "slides.sink_head", "diagonal": "slides.diagonal_head"}


def example_heads(heads: dict[str, np.ndarray]) -> dict[str, Head]:
    """{"sink": the strongest sink head, "diagonal": the strongest diagonal head}."""
    return {kind: strongest(heads, kind) for kind in ("sink", "diagonal")}


def figures(
    trace: object, maps: dict[str, np.ndarray], lang: str = "en", terms: object | None = None
) -> dict[str, go.Figure]:
    """Named slide figures of ``trace``; ``maps`` holds the (query, key) weights of each example head by kind, and
    ``terms`` the strongest sink head's QK attribution (``experiments.qk.QKTerms``), where the model has one."""
    tr = Text(lang)
    labels = token_labels(trace.tokens)
    shown = {
        "head_map": fig_head_map(trace.heads, "sink", lang=lang),
        "kind_counts": fig_kind_counts(trace.heads["kind"], lang=lang),
        "depth_profile": fig_depth_profile(trace.heads, trace.layers, lang=lang),
    }
    for kind, (layer, head) in example_heads(trace.heads).items():
        title = tr(TITLES[kind], layer=layer, head=head, score=round(float(trace.heads[kind][layer, head]), 2))
        shown[f"{kind}_head"] = fig_attention(maps[kind], labels, labels, title, lang=lang)
    shown["key_map"] = fig_key_map(trace.key_sink, list(trace.tokens), lang=lang, skip_first=True)
    if trace.writes is not None:
        shown["first_writes"] = fig_first_writes(trace.writes.attn_write, trace.writes.mlp_write, lang=lang)
    if terms is not None:
        largest = terms.largest(QK_TERMS)
        rest = float(terms.terms.sum() - sum(value for _, value in largest))
        where = {"layer": terms.layer, "head": terms.head, "first": terms.first, "last": terms.last}
        shown["qk_terms"] = fig_qk_terms(largest, rest, terms.score, where, lang=lang)
    return shown
