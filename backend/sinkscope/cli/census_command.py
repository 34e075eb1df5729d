"""``sinkscope census``: sink metrics of every window of a corpus, on Ray, written as a Parquet dataset."""

from __future__ import annotations

import argparse

from sinkscope.cli.arguments import UsageError, ranged
from sinkscope.core.bundled import DEFAULT_MODEL


def _integers(text: str) -> list[int]:
    """Comma-separated window lengths, each within ``ranges.RANGES["lengths"]``."""
    length = ranged("lengths")
    values = [length(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError("give at least one length")
    return sorted(set(values))


class Bar:
    """Documents done, tokens/s and time left on stderr (tqdm)."""

    def __init__(self) -> None:
        self.bar = None

    def __call__(self, progress: object) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=progress.docs_total, unit="doc", desc="census", dynamic_ncols=True)
        self.bar.update(progress.docs_done - self.bar.n)  # tqdm's own clock gives the rate and the time left
        rate = progress.tokens / progress.seconds if progress.seconds else 0.0
        self.bar.set_postfix_str(f"{progress.windows} windows, {rate:.0f} tokens/s", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(args: argparse.Namespace) -> None:
    from sinkscope.census.runner import CensusRequest, Cluster, describe, run_census

    models = [m.strip() for m in args.model.split(",") if m.strip()]
    if args.address and args.address not in ("auto", "local") and "://" not in args.address and ":" not in args.address:
        raise UsageError(f"--address {args.address}: give auto, host:port or ray://host:10001.")
    request = CensusRequest(args.corpus, models, args.lengths, args.windows, args.max_docs, args.text_column)
    cluster = Cluster(args.address, args.workers, args.gpus_per_worker, verbose=args.debug)
    bar = Bar()
    try:
        summary = run_census(request, args.out, cluster, progress=bar)
    finally:
        bar.close()
    print(describe(summary))
    print(f"written to {args.out} (read it with pandas.read_parquet('{args.out}/heads'), or open it in the app)")


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("census", help="sink metrics over a whole corpus, on Ray, to Parquet")
    command.add_argument("corpus", help="a folder of .txt files, a .jsonl or .parquet file, or 'builtin'")
    command.add_argument("--out", required=True, help="the census folder (a rerun skips windows already there)")
    command.add_argument("--model", default=DEFAULT_MODEL, help="comma-separated models")
    command.add_argument("--lengths", type=_integers, default=[128, 512], help="window lengths in tokens (128,512)")
    command.add_argument("--windows", type=ranged("windows"), default=1, help="windows per document and length (1)")
    command.add_argument("--max-docs", type=ranged("max_docs"), help="use only the first N documents")
    command.add_argument("--text-column", default="text", help="the text field of a .jsonl or .parquet corpus")
    command.add_argument("--workers", type=ranged("workers"), help="analysis workers (default: one per CPU or GPU)")
    command.add_argument(
        "--gpus-per-worker", type=ranged("gpus_per_worker", float), default=0.0, help="GPUs each worker holds"
    )
    command.add_argument("--address", help="join a Ray cluster: auto or ray://host:10001 (default: start Ray here)")
    command.set_defaults(run=run)
