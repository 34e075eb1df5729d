"""Command line: ``python -m backend analyze ...`` for batch numbers.

Errors a user can fix print one line and exit 2; nothing prints a traceback unless --debug.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from backend.errors import InputError, SinkscopeError, TokenLimitError
from backend.metrics import DEFAULT_EPS
from backend.tokens import decode_text

log = logging.getLogger("sinkscope")
MAX_FILE_BYTES = 5_000_000


def read_text_file(path: str) -> str:
    """The UTF-8 text of a file, or an InputError that says what is wrong with it."""
    file = Path(path)
    if not file.is_file():
        raise InputError(f"Cannot read '{path}': no such file.")
    if file.stat().st_size > MAX_FILE_BYTES:
        raise InputError(f"'{path}' is larger than {MAX_FILE_BYTES // 1_000_000} MB; pass a shorter text.")
    return decode_text(file.read_bytes(), path, MAX_FILE_BYTES)


def write_csv(path: str, columns: Sequence[str], rows: list[dict[str, object]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _finite(value: object) -> object:
    """JSON has no NaN: write null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def trace_json(trace: object, info: object, eps: float) -> dict[str, object]:
    """Everything the CLI measured, JSON-ready."""
    return {
        "model": info.__dict__,
        "n_tokens": trace.n_tokens,
        "tokens": list(trace.tokens),
        "token_ids": list(trace.token_ids),
        "eps": eps,
        "sink_rate": trace.sink_rate(eps),
        "heads": [{k: _finite(v) for k, v in row.items()} for row in trace.head_rows()],
        "layers": [{k: _finite(v) for k, v in row.items()} for row in trace.layer_rows()],
        "massive": [dict(zip(("layer", "token", "channel", "value"), hit, strict=True)) for hit in trace.massive],
    }


def summary(trace: object, eps: float) -> str:
    kinds = {kind: int((trace.heads["kind"] == kind).sum()) for kind in ("sink", "diagonal", "previous_token", "mixed")}
    n_layers, n_heads = trace.shape
    return (
        f"{trace.n_tokens} tokens, {n_layers} layers x {n_heads} heads\n"
        f"sink rate (eps={eps}, T={trace.n_tokens}): {trace.sink_rate(eps):.1f}% of heads\n"
        f"head kinds: {', '.join(f'{k} {v}' for k, v in kinds.items())}\n"
        f"massive activations: {len(trace.massive)} (largest |h| {trace.layers['top1'].max():.1f})"
    )


def run_analyze(args: argparse.Namespace) -> None:
    from backend.capture import HEAD_COLUMNS, LAYER_COLUMNS, analyze
    from backend.models import load_model

    text = read_text_file(args.text_file) if args.text_file else args.text
    if not text or not text.strip():
        raise InputError("The text is empty: pass --text or a --text-file with some text in it.")
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, progress=log.info)
    print(f"model: {loaded.info.badge()}")
    try:
        trace = analyze(
            loaded,
            text,
            max_tokens=args.max_tokens,
            truncate=args.max_tokens is not None,
        )
    except TokenLimitError as err:
        raise InputError(f"{err} Pass --max-tokens N to analyze only the first N tokens.") from err
    print(summary(trace, args.eps))
    if args.heads_csv:
        write_csv(args.heads_csv, HEAD_COLUMNS, trace.head_rows())
    if args.layers_csv:
        write_csv(args.layers_csv, LAYER_COLUMNS, trace.layer_rows())
    if args.json:
        Path(args.json).write_text(json.dumps(trace_json(trace, loaded.info, args.eps), indent=1))


def parser() -> argparse.ArgumentParser:
    from backend.models import DEFAULT_MODEL

    root = argparse.ArgumentParser(prog="python -m backend", description="Sinkscope: measure attention sinks.")
    root.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = root.add_subparsers(dest="command", required=True)
    analyze = commands.add_parser("analyze", help="per-head and per-layer metrics of one text")
    analyze.add_argument("--model", default=DEFAULT_MODEL, help="bundled key, hub id or local directory")
    source = analyze.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text itself")
    source.add_argument("--text-file", help="a UTF-8 text file")
    analyze.add_argument("--max-tokens", type=int, help="analyze only the first N tokens")
    analyze.add_argument(
        "--eps",
        type=float,
        default=DEFAULT_EPS,
        help="sink-rate threshold (default 0.3)",
    )
    analyze.add_argument("--heads-csv", help="write per-head metrics here")
    analyze.add_argument("--layers-csv", help="write per-layer metrics here")
    analyze.add_argument("--json", help="write everything as JSON here")
    analyze.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    analyze.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    analyze.set_defaults(run=run_analyze)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if getattr(args, "max_tokens", None) is not None and args.max_tokens < 1:
        print("error: --max-tokens must be at least 1", file=sys.stderr)
        return 2
    try:
        args.run(args)
    except SinkscopeError as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError, MemoryError) as err:
        if args.debug:
            raise
        print(
            f"error: {type(err).__name__}: {err} (rerun with --debug for details)",
            file=sys.stderr,
        )
        return 1
    return 0
