"""Benchmark: what each explorer figure sends to the browser, and how long a head scrub takes.

    python bench/bench_payload.py [--tokens 512,2048]

Payload is the size of the figure's JSON: what st.plotly_chart ships, or the data of the component that draws
the HTML head map and kind counts (sinkscope.plot.html_figures). The scrub time is the work
one head change does on a cached trace and cached layer maps (building both one-head figures).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydoc_data.topics import topics  # noqa: E402

import numpy as np  # noqa: E402
from sinkscope import plot  # noqa: E402
from sinkscope.core.bundled import DEFAULT_MODEL  # noqa: E402
from sinkscope.core.capture import analyze, attention_maps, thumbnails  # noqa: E402
from sinkscope.core.metrics import value_weighted, without_first_keys  # noqa: E402
from sinkscope.core.models import load_model  # noqa: E402
from sinkscope.core.tokens import token_labels  # noqa: E402

ZOOM = 256


def one_head_figures(maps: object, labels: list[str], head: int) -> list:
    raw = plot.fig_attention(without_first_keys(maps.weights[head]), labels, labels[1:], "past the sink")
    weighted = value_weighted(maps.weights[head], maps.value_norms[head])
    return [raw, plot.fig_attention(weighted, labels, labels, "reads", max_cells=ZOOM)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", default="512,2048")
    args = parser.parse_args()
    loaded = load_model(DEFAULT_MODEL)
    text = "\n".join(topics.values())
    print("| T | figure | payload (KB) |")
    print("|---:|---|---:|")
    for n_tokens in map(int, args.tokens.split(",")):
        trace = analyze(loaded, text, max_tokens=n_tokens, truncate=True)
        labels = token_labels(trace.tokens)
        maps = attention_maps(loaded, trace.token_ids, 15)
        layer_thumbs = np.stack([plot.pool_max(m, 64)[0] for m in maps.weights])[None]
        built = {
            "head map (HTML)": plot.head_map_html(trace.heads, "sink"),
            "kinds per layer (HTML)": plot.kind_counts_html(trace.heads["kind"]),
            "one head (pooled)": one_head_figures(maps, labels, 3)[0],
            "one head, value-weighted": one_head_figures(maps, labels, 3)[1],
            "one head, zoomed window": plot.fig_attention(
                maps.weights[3][:ZOOM, :ZOOM], labels[:ZOOM], labels[:ZOOM], "zoom"
            ),
            "heads of one layer": plot.fig_thumbnails(layer_thumbs, "layer", "layer"),
            "all layers x heads": plot.fig_thumbnails(thumbnails(loaded, trace.token_ids), "layer", "all"),
            "depth profile": plot.fig_depth_profile(trace.heads, trace.layers),
        }
        for name, fig in built.items():
            sent = json.dumps({"html": fig}) if isinstance(fig, str) else fig.to_json()
            print(f"| {trace.n_tokens} | {name} | {len(sent) / 1024:.0f} |")
        scrubs = []
        for head in range(loaded.info.n_heads):
            start = time.perf_counter()
            for fig in one_head_figures(maps, labels, head):
                fig.to_json()
            scrubs.append(time.perf_counter() - start)
        print(f"| {trace.n_tokens} | head scrub, median of {len(scrubs)} (s) | {statistics.median(scrubs):.3f} |")


if __name__ == "__main__":
    main()
