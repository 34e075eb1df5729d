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
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

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


def finite(value: object) -> object:
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
        "heads": [{k: finite(v) for k, v in row.items()} for row in trace.head_rows()],
        "layers": [{k: finite(v) for k, v in row.items()} for row in trace.layer_rows()],
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


def run_stream(args: argparse.Namespace) -> None:
    import time

    from backend.models import load_model
    from backend.streaming import METHODS, builtin_text, method_cache, perplexity, run_method

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise InputError(f"Unknown method(s) {', '.join(unknown) or '(none)'}: choose from {', '.join(METHODS)}.")
    text = read_text_file(args.text_file) if args.text_file else builtin_text()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, progress=log.info)
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"][: args.tokens]
    if len(ids) < args.tokens:
        raise InputError(f"The text has only {len(ids)} tokens; pass a longer --text-file or fewer --tokens.")
    print(f"model: {loaded.info.badge()}\n{len(ids)} tokens, sinks {args.sinks}, window {args.window}")
    rows, curves = [], {}
    for method in methods:
        start = time.perf_counter()
        curves[method] = run_method(loaded, ids, method, args.sinks, args.window, _progress_logger(method))
        sinks, window = method_cache(method, args.sinks, args.window, len(ids))
        row = {"method": method, "sinks": sinks, "window": window, "tokens": len(ids)}
        row |= {"ppl": perplexity(curves[method]), "seconds": round(time.perf_counter() - start, 2)}
        rows.append(row)
        print(f"{method:12s} sinks {sinks:4d}  window {window:5d}  ppl {row['ppl']:10.3f}  {row['seconds']:7.1f} s")
    if args.csv:
        write_csv(args.csv, ["method", "sinks", "window", "tokens", "ppl", "seconds"], rows)
    if args.per_token_csv:
        per_token = [{"position": i + 1} | {m: float(c[i]) for m, c in curves.items()} for i in range(len(ids) - 1)]
        write_csv(args.per_token_csv, ["position", *curves], per_token)


def _polarize_report(args: argparse.Namespace) -> dict[str, object]:
    from backend import lab

    run = lab.polarize(args.attention, args.loss, steps=args.steps, seed=args.seed, lr=args.lr or 0.5)
    print(f"{args.attention}, {args.loss} loss: entropy {run.entropy[0]:.3f} -> {run.entropy[-1]:.3f}")
    return {
        "attention": args.attention,
        "loss": args.loss,
        "steps": run.steps[-1],
        "final_entropy": run.entropy[-1],
        "final_largest_weight": float(np.max(np.abs(run.weights[-1]))),
        "ratio_curve": [{"step": step, "ratio": ratio} for step, ratio in zip(run.steps, run.ratio, strict=True)],
    }


def _induction_report(args: argparse.Namespace) -> dict[str, object]:
    from backend import lab

    run = lab.train_induction(args.attention, steps=args.steps, seed=args.seed, lr=args.lr or 1e-3)
    print(
        f"{args.attention}: loss {run.loss[-1]:.3f}, accuracy {run.accuracy[-1]:.3f}, sink rate {run.sink_rate():.1f}%"
    )
    if args.save:
        Path(args.save).mkdir(parents=True, exist_ok=True)
        run.save(Path(args.save) / f"{args.attention}.json")
    final = np.array(run.bos_attention[-1])  # (layer, head)
    heads = [
        {"layer": layer, "head": head, "value": float(final[layer, head])} for layer, head in np.ndindex(final.shape)
    ]
    return {
        "attention": args.attention,
        "steps": run.steps[-1],
        "final_loss": run.loss[-1],
        "final_accuracy": run.accuracy[-1],
        "sink_rate_eps_0.3": run.sink_rate(0.3),
        "bos_attention": heads,
    }


def run_lab(args: argparse.Namespace) -> None:
    report = _polarize_report(args) if args.experiment == "polarize" else _induction_report(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def _progress_logger(method: str) -> Callable[[list[float], int], bool]:
    def report(done: list[float], total: int) -> bool:
        if len(done) % max(1, total // 10) == 0:
            log.info("%s: %d/%d", method, len(done), total)
        return True

    return report


def model_options(command: argparse.ArgumentParser) -> None:
    from backend.models import DEFAULT_MODEL

    command.add_argument("--model", default=DEFAULT_MODEL, help="bundled key, hub id or local directory")
    command.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    command.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")


def text_options(command: argparse.ArgumentParser) -> None:
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text itself")
    source.add_argument("--text-file", help="a UTF-8 text file")
    command.add_argument("--max-tokens", type=int, help="use only the first N tokens")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m backend", description="Sinkscope: measure attention sinks.")
    root.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = root.add_subparsers(dest="command", required=True)
    analyze = commands.add_parser("analyze", help="per-head and per-layer metrics of one text")
    model_options(analyze)
    text_options(analyze)
    analyze.add_argument(
        "--eps",
        type=float,
        default=DEFAULT_EPS,
        help="sink-rate threshold (default 0.3)",
    )
    analyze.add_argument("--heads-csv", help="write per-head metrics here")
    analyze.add_argument("--layers-csv", help="write per-layer metrics here")
    analyze.add_argument("--json", help="write everything as JSON here")
    analyze.set_defaults(run=run_analyze)
    stream = commands.add_parser("stream", help="streaming perplexity with and without attention sinks")
    model_options(stream)
    stream.add_argument("--text-file", help="a long UTF-8 text (default: Python's built-in pydoc topics)")
    stream.add_argument("--tokens", type=int, default=1024, help="how many tokens to stream")
    stream.add_argument("--sinks", type=int, default=4, help="first tokens kept in the cache (S)")
    stream.add_argument("--window", type=int, default=252, help="recent tokens kept in the cache (W)")
    stream.add_argument("--methods", default="dense,window,sinks,recompute", help="comma-separated")
    stream.add_argument("--csv", help="one row per method: method,sinks,window,tokens,ppl,seconds")
    stream.add_argument("--per-token-csv", help="the NLL of every token, one column per method")
    stream.set_defaults(run=run_stream)
    lab = commands.add_parser("lab", help="training experiments: softmax polarization, sinks emerging")
    lab.add_argument("experiment", choices=["polarize", "induction"])
    lab.add_argument("--attention", default="softmax", help="softmax, softmax+1, sigmoid, relu or linear")
    lab.add_argument("--loss", default="logistic", choices=["logistic", "square"], help="polarize only")
    lab.add_argument("--steps", type=int, default=3000)
    lab.add_argument("--seed", type=int, default=0)
    lab.add_argument("--lr", type=float, help="default 0.5 (polarize) or 1e-3 (induction)")
    lab.add_argument("--json", help="write the final numbers here")
    lab.add_argument("--save", help="induction: write the whole run to DIR/<attention>.json for the page")
    lab.set_defaults(run=run_lab)
    from backend.cli_intervene import add_intervene  # it imports this module's helpers

    add_intervene(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for name in ("max_tokens", "tokens", "window", "steps"):
        if getattr(args, name, 1) is not None and getattr(args, name, 1) < 1:
            print(f"error: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
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
