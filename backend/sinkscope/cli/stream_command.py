"""``sinkscope stream``: streaming perplexity with and without attention sinks (StreamingLLM)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from sinkscope.cli.arguments import UsageError, load, log, model_options, ranged, read_text_file, write_csv
from sinkscope.core.names import STREAM_METHODS as METHODS


def _progress_logger(method: str) -> Callable[[list[float], int], bool]:
    def report(done: list[float], total: int) -> bool:
        if len(done) % max(1, total // 10) == 0:
            log.info("%s: %d/%d", method, len(done), total)
        return True

    return report


def run(args: argparse.Namespace) -> None:
    from sinkscope.core.loss import perplexity
    from sinkscope.core.texts import builtin_text
    from sinkscope.experiments.streaming import method_cache, streaming_nll

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UsageError(f"Unknown method(s) {', '.join(unknown) or '(none)'}: choose from {', '.join(METHODS)}.")
    text = read_text_file(args.text_file) if args.text_file else builtin_text()
    loaded = load(args)
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"][: args.tokens]
    if len(ids) < args.tokens:
        raise UsageError(f"The text has only {len(ids)} tokens; pass a longer --text-file or fewer --tokens.")
    if len(ids) <= args.sinks + args.window:
        raise UsageError(f"{len(ids)} tokens never fill a cache of {args.sinks} + {args.window}: every method would "
                         "equal the dense pass. Stream more --tokens or use a smaller --window.")  # fmt: skip
    print(f"model: {loaded.info.badge()}\n{len(ids)} tokens, sinks {args.sinks}, window {args.window}")
    rows, curves = [], {}
    for method in methods:
        start = time.perf_counter()
        curves[method] = streaming_nll(loaded, ids, method, args.sinks, args.window, _progress_logger(method))
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


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("stream", help="streaming perplexity with and without attention sinks")
    model_options(command)
    command.add_argument("--text-file", help="a long UTF-8 text (default: Python's built-in pydoc topics)")
    command.add_argument("--tokens", type=ranged("stream_tokens"), default=1024, help="how many tokens to stream")
    command.add_argument("--sinks", type=ranged("sinks"), default=4, help="first tokens kept in the cache (S)")
    command.add_argument("--window", type=ranged("window"), default=252, help="recent tokens kept in the cache (W)")
    command.add_argument("--methods", default="dense,window,sinks,recompute", help="comma-separated")
    command.add_argument("--csv", help="one row per method: method,sinks,window,tokens,ppl,seconds")
    command.add_argument("--per-token-csv", help="the NLL of every token, one column per method")
    command.set_defaults(run=run)
