"""``sinkscope analyze``: per-head and per-layer metrics of one text, as CSV and JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sinkscope.cli.arguments import finite, ids_of, load, model_options, number, text_options, write_csv
from sinkscope.core.names import DEFAULT_EPS, HEAD_COLUMNS, KEY_COLUMNS, KINDS, LAYER_COLUMNS


def trace_json(trace: object, info: object, eps: float) -> dict[str, object]:
    """Everything the CLI measured, JSON-ready."""
    return {
        "model": info.__dict__,
        "n_tokens": trace.n_tokens,
        "tokens": list(trace.tokens),
        "token_ids": list(trace.token_ids),
        "eps": eps,
        "sink_rate": trace.sink_rate(eps),
        "heads": [{k: finite(v) for k, v in row.items()} for row in trace.head_rows()],
        "layers": [{k: finite(v) for k, v in row.items()} for row in trace.layer_rows()],
        "massive": [dict(zip(("layer", "token", "channel", "value"), hit, strict=True)) for hit in trace.massive],
        "keys": [{k: finite(v) for k, v in row.items()} for row in trace.key_rows()],
    }


def summary(trace: object, eps: float) -> str:
    kinds = {kind: int((trace.heads["kind"] == kind).sum()) for kind in KINDS}
    n_layers, n_heads = trace.shape
    return (
        f"{trace.n_tokens} tokens, {n_layers} layers x {n_heads} heads\n"
        f"sink rate (eps={eps}, T={trace.n_tokens}): {trace.sink_rate(eps):.1f}% of heads\n"
        f"head kinds: {', '.join(f'{k} {v}' for k, v in kinds.items())}\n"
        f"massive activations: {len(trace.massive)} (largest |h| {trace.layers['top1'].max():.1f})"
    )


def run(args: argparse.Namespace) -> None:
    from sinkscope.core.capture import analyze_ids

    loaded = load(args)
    print(f"model: {loaded.info.badge()}")
    trace = analyze_ids(loaded, ids_of(args, loaded))
    print(summary(trace, args.eps))
    if args.heads_csv:
        write_csv(args.heads_csv, HEAD_COLUMNS, trace.head_rows())
    if args.layers_csv:
        write_csv(args.layers_csv, LAYER_COLUMNS, trace.layer_rows())
    if args.keys_csv:
        write_csv(args.keys_csv, KEY_COLUMNS, trace.key_rows())
    if args.json:
        Path(args.json).write_text(json.dumps(trace_json(trace, loaded.info, args.eps), indent=1))


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("analyze", help="per-head and per-layer metrics of one text")
    model_options(command)
    text_options(command)
    command.add_argument(
        "--eps", type=number(float, 0, 1, strict=True), default=DEFAULT_EPS, help="sink-rate threshold (default 0.3)"
    )
    command.add_argument("--heads-csv", help="write per-head metrics here")
    command.add_argument("--layers-csv", help="write per-layer metrics here")
    command.add_argument("--keys-csv", help="write key_sink per layer and key here (layer, position, token, key_sink)")
    command.add_argument("--json", help="write everything as JSON here")
    command.set_defaults(run=run)
