"""A sink census over a corpus on Ray Data: read, cut windows, analyze them on an actor pool, write Parquet.

Without an address Ray starts locally on this machine; ``address="auto"`` or ``"ray://host:10001"`` joins a
cluster, and ``gpus_per_worker`` puts one model copy on each GPU. Ray restarts a worker that dies and runs
its windows again; the output (``census.files``) holds every window exactly once, and a rerun skips the
windows already written::

    summary = run_census(CensusRequest("corpus/", ["smollm2-135m"], [128, 512]), "out/")
    heads = pandas.read_parquet("out/heads")   # one row per model, document, window, layer and head
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sinkscope.census.corpus import MAX_DOC_BYTES, WINDOW_COLUMNS, Windower, documents, open_corpus
from sinkscope.census.files import KEY_POSITIONS, Writer
from sinkscope.census.reaper import start as start_reaper
from sinkscope.core import ranges
from sinkscope.core.errors import InputError
from sinkscope.core.models import load_tokenizer
from sinkscope.core.names import HEAD_METRICS, LAYER_METRICS

log = logging.getLogger(__name__)
MIN_LENGTH = 2  # a window needs a query after its first token
FLUSH_WINDOWS = 32  # windows buffered before a write: few files, little lost to a crash
FLUSH_SECONDS = 30.0
BLOCKS_PER_WORKER = 16  # documents are dealt to the workers in this many blocks each, for an even share


@dataclass(frozen=True)
class CensusRequest:
    corpus: str  # a folder of .txt, a .jsonl or .parquet file, or "builtin"
    models: list[str]
    lengths: list[int]
    windows_per_doc: int = 1
    max_docs: int | None = None
    text_column: str = "text"


@dataclass(frozen=True)
class Cluster:
    address: str | None = None  # None: start Ray on this machine
    workers: int | None = None  # None: one per CPU (or per GPU with gpus_per_worker)
    gpus_per_worker: float = 0.0
    verbose: bool = False  # Ray's own start-up lines (token authentication, log levels) on stderr


@dataclass
class CensusProgress:
    docs_done: int
    docs_total: int
    windows: int  # analyzed in this run
    tokens: int
    seconds: float


@dataclass
class CensusSummary:
    windows: int = 0  # analyzed and written by this run
    already: int = 0  # found written by an earlier run
    tokens: int = 0
    docs: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # problem -> documents (too_short: document-lengths)
    seconds: float = 0.0
    renamed: int = 0  # documents whose id repeated an earlier one's, analyzed under id#2, id#3, ...


class CensusWorker:
    """Ray Data actor: loads each model once, analyzes one window per call, passes problem rows through."""

    def __init__(self, device: str, dtype: str) -> None:
        self.device, self.dtype, self.models = device, dtype, {}

    def loaded(self, spec: str) -> Any:
        from sinkscope.core.models import load_model

        if spec not in self.models:
            self.models[spec] = load_model(spec, device=self.device, dtype=self.dtype)
        return self.models[spec]

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        from sinkscope.core.capture import analyze_ids

        out: dict[str, list] = {name: [] for name in RESULT_COLUMNS}
        for row in (dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)):
            trace = analyze_ids(self.loaded(row["model"]), list(row["ids"])) if not row["problem"] else None
            for name in PASSED:
                out[name].append(row[name])
            out["n_heads"].append(trace.shape[1] if trace else 0)
            # plain lists, not arrays: Ray cannot join tensor columns with the empty ones of problem rows
            for name in HEAD_METRICS:
                out[name].append(trace.heads[name].ravel().tolist() if trace else [])  # (layer * head,)
            out["kind"].append(trace.heads["kind"].ravel().tolist() if trace else [])
            for name in LAYER_METRICS:
                out["layer_" + name].append(trace.layers[name].tolist() if trace else [])  # (layer + 1,)
            out["key_sink"].append(first_keys(trace.key_sink).ravel().tolist() if trace else [])  # (layer * key,)
        return out


def first_keys(key_sink: np.ndarray) -> np.ndarray:
    """key_sink of the first KEY_POSITIONS keys (layer, key); NaN past a window's last key."""
    kept = np.full((key_sink.shape[0], KEY_POSITIONS), np.nan)
    shown = min(KEY_POSITIONS, key_sink.shape[1])
    kept[:, :shown] = key_sink[:, :shown]
    return kept


PASSED = tuple(name for name in WINDOW_COLUMNS if name != "ids")  # a window's identity, as the windower gave it
RESULT_COLUMNS = (*PASSED, "n_heads", *HEAD_METRICS, "kind", *("layer_" + name for name in LAYER_METRICS), "key_sink")


def start_ray(cluster: Cluster) -> None:
    """Join ``cluster.address``, or start Ray on this machine (no dashboard, quiet logs)."""
    import ray

    if ray.is_initialized():
        return
    quiet = {"logging_level": logging.DEBUG if cluster.verbose else logging.ERROR, "log_to_driver": False}
    # Ray's core logs a harmless error line for every restartable actor whose arguments sit in its object store
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    with contextlib.nullcontext() if cluster.verbose else _stderr_silenced():
        if cluster.address:
            ray.init(address=cluster.address, **quiet)
        else:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, **quiet)
            start_reaper()  # the Ray started here ends with this process, however it ends


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """The process's stderr (file descriptor 2, which Ray's C++ core writes to) sent nowhere for the block: Ray's
    start-up lines would come before the user's own ``error:`` line. An exception still propagates."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as nowhere:
            os.dup2(nowhere.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def check_request(request: CensusRequest) -> Any:
    """Every mistake a user can make, found before Ray starts; returns the opened corpus."""
    if not request.models:
        raise InputError("error.census_no_model")
    if not request.lengths or min(request.lengths) < MIN_LENGTH:
        raise InputError("error.census_lengths", least=MIN_LENGTH, lengths=", ".join(map(str, request.lengths)))
    for name, value in (("windows", request.windows_per_doc), ("max_docs", request.max_docs or 1)):
        ranges.check(name, value)
    for spec in request.models:
        limit = load_tokenizer(spec)[1]  # also dequantizes a bundled model once, before workers start
        if max(request.lengths) > limit:
            raise InputError("error.census_too_long", length=max(request.lengths), model=spec, limit=limit)
    return open_corpus(request.corpus, request.text_column, request.max_docs)


def worker_pool(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    """(workers, their Ray resources): one per CPU, or per GPU share, of the cluster unless given."""
    import ray

    resources = ray.cluster_resources()
    if cluster.gpus_per_worker:
        workers = cluster.workers or max(1, int(resources.get("GPU", 0) // cluster.gpus_per_worker))
        return workers, {"num_gpus": cluster.gpus_per_worker, "num_cpus": 1}
    cpus = int(resources.get("CPU", 1))
    workers = cluster.workers or cpus
    return workers, {"num_cpus": max(1, cpus // workers)}  # one worker on two cores runs two torch threads


def pipeline(request: CensusRequest, corpus: Any, cluster: Cluster, done: set) -> Any:
    """Documents -> windows (plain tasks, one at a time, with the tokenizers) -> analyses (the worker pool)."""
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False  # the census draws its own
    # not a line per stage on the user's terminal, nor the "no CPU left, the job will hang" warning: the
    # workers hold every CPU on purpose, and the stages before them need none
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    workers, resources = worker_pool(cluster)
    # read and deal out the whole corpus before the workers start: they hold every CPU, and a step that Ray
    # runs on a CPU of its own (listing files) would wait behind them for ever
    blocks = max(1, min(corpus.n_docs, BLOCKS_PER_WORKER * workers))  # a one-file corpus still feeds every worker
    docs = documents(corpus, blocks, request.max_docs).materialize()
    windower = Windower(tuple(request.models), tuple(request.lengths), request.windows_per_doc, frozenset(done))
    windows = docs.map_batches(windower, num_cpus=0, concurrency=1)  # one task at a time: no CPU of its own
    device = "cuda" if cluster.gpus_per_worker else "cpu"
    return windows.map_batches(
        CensusWorker,
        fn_constructor_kwargs={"device": device, "dtype": "auto"},
        compute=ray.data.ActorPoolStrategy(size=workers),
        batch_size=1,  # one window a call: the fairest split, and progress as each one ends
        **resources,  # Ray Data restarts a worker that dies (max_restarts=-1) and retries its window
    )


def run_census(
    request: CensusRequest,
    out: str | Path,
    cluster: Cluster = Cluster(),
    progress: Callable[[CensusProgress], None] | None = None,
) -> CensusSummary:
    """Analyze every window of the corpus not yet in ``out``; write them there as Parquet."""
    corpus = check_request(request)
    writer = Writer(Path(out))
    summary = CensusSummary(already=len(writer.done), renamed=corpus.renamed)
    writer.write_manifest(asdict(request), complete=False)
    start_ray(cluster)
    started, last_flush, waiting, skipped = time.monotonic(), time.monotonic(), Counter(), Counter()
    if progress is not None:
        progress(CensusProgress(0, corpus.n_docs, 0, 0, 0.0))  # the bar's clock starts with the workers
    for batch in pipeline(request, corpus, cluster, writer.done).iter_batches(batch_size=None, batch_format="numpy"):
        for row in (dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)):
            if _count(row, summary, waiting, skipped):
                writer.add(row)
        if writer.buffered >= FLUSH_WINDOWS or time.monotonic() - last_flush > FLUSH_SECONDS:
            writer.flush()
            last_flush = time.monotonic()
        if progress is not None:
            seconds = time.monotonic() - started
            progress(CensusProgress(summary.docs, corpus.n_docs, summary.windows, summary.tokens, seconds))
    writer.flush()
    summary.skipped, summary.seconds = {k: v for k, v in skipped.items() if v}, time.monotonic() - started
    if not summary.windows and not summary.already:  # the advice follows the reason
        key = "error.census_nothing" if "too_short" in summary.skipped else "error.census_nothing_read"
        raise InputError(key, skipped=_said(summary.skipped), mb=MAX_DOC_BYTES // 1_000_000)
    writer.write_manifest(asdict(request), complete=True, summary=asdict(summary))
    return summary


def _count(row: dict[str, Any], summary: CensusSummary, waiting: Counter, skipped: Counter) -> bool:
    """Count one returned row into the summary; True when it is an analyzed window to write."""
    problem = str(row["problem"])
    if problem:  # "too_short" is one length of a document; the other problems end a document
        skipped[problem] += int(problem != "finished")
        summary.docs += int(problem != "too_short")
        return False
    summary.windows, summary.tokens = summary.windows + 1, summary.tokens + int(row["length"])
    waiting[row["doc_id"]] += 1
    summary.docs += int(waiting[row["doc_id"]] == row["doc_windows"])  # its last window is back
    return True


def _said(skipped: dict[str, int]) -> str:
    return ", ".join(f"{problem} {count}" for problem, count in sorted(skipped.items())) or "none"


def describe(summary: CensusSummary) -> str:
    """One line for the command line."""
    rate = summary.tokens / summary.seconds if summary.seconds else 0.0
    return (
        f"{summary.windows} windows analyzed ({summary.tokens} tokens, {rate:.0f} tokens/s), "
        f"{summary.already} already written; {summary.docs} documents"
        + (f" ({summary.renamed} with an id seen before, renamed id#2, id#3, ...)" if summary.renamed else "")
        + f"; skipped: {_said(summary.skipped)}"
    )
