"""A corpus as a Ray dataset of documents, and documents cut into token windows: the census's first stages.

A corpus is a folder of ``.txt`` files, a ``.jsonl`` file with a text field, a Parquet file with a text column,
or ``builtin`` (the long text the streaming page uses, cut into documents). Each document row is
``doc_id, text, problem``; a document that cannot be read keeps its row, with ``problem`` saying why, so the
census counts it instead of failing.

Every document has an id of its own: a file's path, a line's ``id`` field, or else a hash of its text (stable
across reruns, so a resumed census finds its windows). An id seen before (two lines with one ``id``, or the same
text twice) gets ``#2``, ``#3``, ... in the order of the corpus, and the summary counts those renamed: two
documents are never merged into one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sinkscope.core.errors import InputError, reason_of
from sinkscope.core.tokens import cut_windows, decode_text

log = logging.getLogger(__name__)
BUILTIN = "builtin"
BUILTIN_DOC_CHARS = 7_000  # about 1,800 tokens of the built-in text: one window of each default length
MAX_DOC_BYTES = 50_000_000
WindowKey = tuple[str, str, int, int]  # (model, doc_id, length, start)


@dataclass(frozen=True)
class Corpus:
    source: str  # a path, or BUILTIN
    kind: str  # "folder", "jsonl", "parquet" or "builtin"
    text_column: str
    n_docs: int  # documents it will yield (at most max_docs): what the progress bar counts to
    files: tuple[str, ...] = ()  # a folder's .txt files, sorted
    rows: tuple[dict[str, str], ...] = ()  # a .jsonl or .parquet corpus's documents, read when it is opened
    renamed: int = 0  # documents whose id repeated an earlier one's (given #2, #3, ...)


def content_id(text: str) -> str:
    """A document's id when its source has none: stable across reruns, so a resumed census finds its windows."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def builtin_documents() -> list[str]:
    from sinkscope.core.texts import builtin_text

    text = builtin_text()
    return [text[i : i + BUILTIN_DOC_CHARS] for i in range(0, len(text) - BUILTIN_DOC_CHARS + 1, BUILTIN_DOC_CHARS)]


def open_corpus(source: str, text_column: str = "text", max_docs: int | None = None) -> Corpus:
    """Check a corpus before any work: what it is and how many documents it holds, or an InputError."""
    cap = (lambda n: min(n, max_docs)) if max_docs else (lambda n: n)
    if source == BUILTIN:
        return Corpus(BUILTIN, "builtin", text_column, cap(len(builtin_documents())))
    path = Path(source).expanduser()
    if path.is_dir():
        files = tuple(sorted(str(p) for p in path.rglob("*.txt") if p.is_file()))[: max_docs or None]
        if not files:
            raise InputError("error.census_empty", path=source)
        return Corpus(str(path), "folder", text_column, len(files), files)
    if not path.is_file():
        raise InputError("error.census_no_corpus", path=source)
    if path.suffix == ".jsonl":
        rows = _jsonl_rows(path, text_column, max_docs)
    elif path.suffix == ".parquet":
        _parquet_rows(path, text_column)
        rows = _parquet_texts(path, text_column, max_docs)
    else:
        raise InputError("error.census_format", path=source)
    if not rows:
        raise InputError("error.census_empty", path=source)
    ids, renamed = unique_ids([row["doc_id"] for row in rows])
    rows = tuple(row | {"doc_id": doc_id} for row, doc_id in zip(rows, ids, strict=True))
    return Corpus(str(path), path.suffix[1:], text_column, len(rows), rows=rows, renamed=renamed)


def unique_ids(ids: list[str]) -> tuple[list[str], int]:
    """Each id as given the first time; a repeat becomes ``id#2``, ``id#3``, ... (never an id already taken).
    Returns the ids and how many were repeats."""
    taken, seen, unique = set(ids), Counter(), []  # a made-up id never takes one the corpus gives
    for doc_id in ids:
        seen[doc_id] += 1
        new, k = doc_id, seen[doc_id]
        while k > 1 and new in taken:
            new, k = f"{doc_id}#{k}", k + 1
        taken.add(new)
        unique.append(new)
    return unique, len(ids) - len(set(ids))


def _jsonl_rows(path: Path, text_column: str, max_docs: int | None) -> list[dict[str, str]]:
    """One row per non-blank line, in order (at most max_docs); a line that is no JSON object with a text is a
    problem row."""
    rows = []
    with path.open("rb") as lines:
        for line in lines:
            if line.strip():
                rows.append(_parse_line(line.decode("utf-8", errors="replace"), text_column))
            if max_docs and len(rows) == max_docs:
                break
    return rows


def _parquet_rows(path: Path, text_column: str) -> int:
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)
    except (OSError, ValueError) as err:  # pyarrow: ArrowInvalid (a ValueError) for a file that is not Parquet
        raise InputError("error.census_bad_parquet", path=str(path), reason=reason_of(err)) from err
    columns = metadata.schema.to_arrow_schema().names
    if text_column not in columns:
        raise InputError("error.census_no_column", path=str(path), column=text_column, columns=", ".join(columns))
    if not metadata.num_rows:
        raise InputError("error.census_empty", path=str(path))
    return metadata.num_rows


def _parquet_texts(path: Path, text_column: str, max_docs: int | None) -> list[dict[str, str]]:
    """The text column, one row group at a time (at most max_docs rows); a cell that is no text is a problem."""
    import pyarrow.parquet as pq

    rows: list[dict[str, str]] = []
    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        for value in file.read_row_group(group, columns=[text_column]).column(0).to_pylist():
            text = value if isinstance(value, str) else ""
            rows.append({"doc_id": content_id(text), "text": text, "problem": "" if text.strip() else "no_text"})
            if max_docs and len(rows) == max_docs:
                return rows
    return rows


def _rows(doc_ids: list[str], texts: list[str], problems: list[str]) -> dict[str, np.ndarray]:
    return {"doc_id": np.array(doc_ids, dtype=object), "text": np.array(texts, dtype=object),
            "problem": np.array(problems, dtype=object)}  # fmt: skip


def _decode_files(batch: dict[str, np.ndarray], root: str) -> dict[str, np.ndarray]:
    """Binary, non-UTF-8 or empty files become problem rows."""
    doc_ids, texts, problems = [], [], []
    for data, path in zip(batch["bytes"], batch["path"], strict=True):
        doc_ids.append(str(Path(path).relative_to(root)))
        try:
            texts.append(decode_text(bytes(data), path, MAX_DOC_BYTES))
            problems.append("")
        except InputError as err:
            texts.append("")
            problems.append(err.message.key.removeprefix("error."))
    return _rows(doc_ids, texts, problems)


def _parse_line(line: str, text_column: str) -> dict[str, str]:
    """One JSON object a line; a line that is not one, or has no text, becomes a problem row."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        record = None
    text = record.get(text_column) if isinstance(record, dict) else None
    ok = isinstance(text, str) and bool(text.strip())
    doc_id = str(record.get("id")) if ok and "id" in record else content_id(text if ok else line)
    return {"doc_id": doc_id, "text": text if ok else "", "problem": "" if ok else "bad_json" if record is None
            else "no_text"}  # fmt: skip


def documents(corpus: Corpus, blocks: int, max_docs: int | None = None) -> Any:
    """The corpus as a Ray dataset of (doc_id, text, problem) in ``blocks`` blocks, dealt out as it is read (no
    second pass to repartition it). Reading takes no CPU reservation: the analysis workers may hold every core,
    and a read waiting for one would stall the whole pipeline."""
    import ray.data

    if corpus.kind == "builtin":
        texts = builtin_documents()[: max_docs or None]
        items = [{"doc_id": f"builtin-{i:03d}", "text": t, "problem": ""} for i, t in enumerate(texts)]
        return ray.data.from_items(items, override_num_blocks=blocks)
    if corpus.kind == "folder":
        files = ray.data.read_binary_files(list(corpus.files), include_paths=True, num_cpus=0,
                                           override_num_blocks=blocks)  # fmt: skip
        return files.map_batches(_decode_files, fn_kwargs={"root": corpus.source}, num_cpus=0)
    # read, and given unique ids, when opened
    return ray.data.from_items(list(corpus.rows[: max_docs or None]), override_num_blocks=blocks)


@functools.cache
def _tokenizer(spec: str) -> Any:
    """Each model's tokenizer loaded once per Ray worker process, which Ray reuses from one batch to the next."""
    from sinkscope.core.models import load_tokenizer  # here, not at the top: reading files needs no torch

    return load_tokenizer(spec)[0]


@dataclass(frozen=True)
class Windower:
    """Ray Data stage (a plain task, in Ray's pooled workers): documents -> one row per window still to analyze,
    per model and length.

    Rows that are not windows carry ``problem``: the document's own (unreadable, no text), ``too_short`` for a
    length it cannot fill, or ``done`` when every window it makes is already written.
    """

    models: tuple[str, ...]
    lengths: tuple[int, ...]
    per_doc: int
    done: frozenset[WindowKey]

    def windows_of(self, doc_id: str, text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(windows to analyze, problem rows) of one readable document."""
        todo, problems = [], []
        for spec in self.models:
            for length in self.lengths:
                cut = cut_windows(_tokenizer(spec), text, length, self.per_doc)
                if not cut:
                    problems.append(_row(spec, doc_id, length, -1, [], "too_short"))
                todo += [_row(spec, doc_id, length, start, ids, "") for start, ids in cut
                         if (spec, doc_id, length, start) not in self.done]  # fmt: skip
        return todo, problems

    def rows_of(self, doc_id: str, text: str, problem: str) -> list[dict[str, Any]]:
        """A document's rows; one with no window left to analyze ends with a ``finished`` row."""
        if problem:
            return [_row("", doc_id, 0, -1, [], problem)]
        todo, short = self.windows_of(doc_id, text)
        for row in todo:
            row["doc_windows"] = len(todo)  # the driver counts a document done when that many have come back
        return todo + short + ([] if todo else [_row("", doc_id, 0, -1, [], "finished")])

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        rows = [row for doc in zip(batch["doc_id"], batch["text"], batch["problem"], strict=True)
                for row in self.rows_of(*doc)]  # fmt: skip
        return {name: [row[name] for row in rows] for name in WINDOW_COLUMNS}


WINDOW_COLUMNS = ("model", "doc_id", "length", "start", "ids", "problem", "doc_windows")


def _row(model: str, doc_id: str, length: int, start: int, ids: list[int], problem: str) -> dict[str, Any]:
    return {"model": model, "doc_id": doc_id, "length": length, "start": start, "ids": ids, "problem": problem,
            "doc_windows": 0}  # fmt: skip
