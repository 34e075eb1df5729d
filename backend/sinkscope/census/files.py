"""A census folder: Parquet tables partitioned by model and length, and ``census.json`` describing the run.

::

    out/census.json                                         arguments, summary, "complete"
    out/heads/model=smollm2-135m/length=512/part-<id>.parquet   doc_id, start, layer, head, sink, ..., kind
    out/layers/model=smollm2-135m/length=512/part-<id>.parquet  doc_id, start, layer, top1, ..., bos_cosine_raw,
                                                              key_sink_0 .. key_sink_15

A part is written under a hidden temporary name and renamed when whole, heads before layers: a window is
written when its layers part exists, and a heads part without its layers twin (a crash between the two
renames) is removed on the next start. So no partial file ever looks complete, and a rerun skips exactly the
windows already written.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from sinkscope.census.corpus import WindowKey
from sinkscope.census.table import Limits, read_heads_table
from sinkscope.core.errors import InputError
from sinkscope.core.names import HEAD_METRICS, LAYER_METRICS, NO_ATTENTION

MANIFEST = "census.json"
TABLES = ("heads", "layers")
WINDOW = ("doc_id", "start")  # with the partitions model and length: one window
KEY_POSITIONS = 16  # the layers table keeps key_sink of the first 16 keys: where the first token's sink, or another, is
KEY_SINK_COLUMNS = tuple(f"key_sink_{j}" for j in range(KEY_POSITIONS))
LOCAL_LIMITS = Limits(rows=20_000_000, decoded_bytes=4 << 30)  # a census of about 70,000 windows of SmolLM2


def _partition(table: str, model: str, length: int) -> Path:
    return Path(table) / f"model={quote(model, safe='')}" / f"length={length}"


def window_rows(row: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A worker's result row -> (heads rows, layers rows) of one window (a hybrid's heads: its attention layers')."""
    n_heads = int(row["n_heads"])
    n_cells = len(row["sink"])
    layer, head = np.divmod(np.arange(n_cells), n_heads)  # rows of the (layer, head) grid, flattened
    heads = pd.DataFrame({"layer": layer, "head": head, **{m: row[m] for m in HEAD_METRICS}, "kind": row["kind"]})
    heads = heads[heads["kind"] != NO_ATTENTION]  # a hybrid's layers without attention have no heads to count
    layers = pd.DataFrame({name: row["layer_" + name] for name in LAYER_METRICS})
    keys = np.full((len(layers), KEY_POSITIONS), np.nan)  # row l: what block l (reading h^l) gives each key; h^L: none
    found = np.asarray(row["key_sink"], dtype=float).reshape(-1, KEY_POSITIONS)  # (layer, key)
    keys[: len(found)] = found
    layers[list(KEY_SINK_COLUMNS)] = keys
    layers.insert(0, "layer", np.arange(len(layers)))
    for table in (heads, layers):
        table.insert(0, "start", int(row["start"]))
        table.insert(0, "doc_id", str(row["doc_id"]))
    return heads, layers


class Writer:
    """Buffers analyzed windows and writes them as whole parts; knows which windows are already written."""

    def __init__(self, out: Path) -> None:
        if out.exists() and not out.is_dir():
            raise InputError("error.census_out_file", path=str(out))
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        remove_unfinished(out)
        self.done: set[WindowKey] = written_windows(out)
        self.rows: list[dict[str, Any]] = []

    @property
    def buffered(self) -> int:
        return len(self.rows)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def flush(self) -> None:
        groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in self.rows:
            groups[str(row["model"]), int(row["length"])].append(row)
        for (model, length), rows in groups.items():
            pairs = [window_rows(row) for row in rows]
            heads, layers = (pd.concat([pair[i] for pair in pairs], ignore_index=True) for i in range(2))
            name = f"part-{uuid.uuid4().hex}.parquet"
            temporary = [self._write_hidden(table, model, length, name, frame)
                         for table, frame in zip(TABLES, (heads, layers), strict=True)]  # fmt: skip
            for hidden, table in zip(temporary, TABLES, strict=True):
                os.replace(hidden, self.out / _partition(table, model, length) / name)  # heads first
            self.done |= {(model, str(row["doc_id"]), length, int(row["start"])) for row in rows}
        self.rows = []

    def _write_hidden(self, table: str, model: str, length: int, name: str, frame: pd.DataFrame) -> Path:
        folder = self.out / _partition(table, model, length)
        folder.mkdir(parents=True, exist_ok=True)
        hidden = folder / f".{name}.tmp"
        frame.to_parquet(hidden, index=False)
        return hidden

    def write_manifest(self, request: dict[str, Any], complete: bool, summary: dict[str, Any] | None = None) -> None:
        manifest = {"request": request, "complete": complete, "summary": summary, "updated": time.time()}
        hidden = self.out / f".{MANIFEST}.tmp"
        hidden.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        os.replace(hidden, self.out / MANIFEST)


def remove_unfinished(out: Path) -> None:
    """Temporary files of an interrupted write, and heads parts whose layers part was never renamed."""
    for hidden in out.rglob(".part-*.tmp"):
        hidden.unlink()
    for part in (out / "heads").rglob("part-*.parquet"):
        if not (out / "layers" / part.relative_to(out / "heads")).exists():
            part.unlink()


def _read(folder: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A partitioned table with its model (str) and length (int) columns; hidden files are not read."""
    table = pd.read_parquet(folder, columns=columns)
    return table.astype({"model": str, "length": int})


def written_windows(out: Path) -> set[WindowKey]:
    if not any((out / "layers").rglob("part-*.parquet")):
        return set()
    keys = _read(out / "layers", ["model", "length", *WINDOW]).drop_duplicates()
    return set(zip(keys["model"], keys["doc_id"], keys["length"], keys["start"], strict=True))


def read_heads(source: Path | bytes, name: str = "", limits: Limits = LOCAL_LIMITS) -> pd.DataFrame:
    """The heads table of a census folder, or of one Parquet file (a path or its bytes: an upload) with the same
    columns, such as the page's download: within ``limits``, every column checked (``sinkscope.census.table``)."""
    folder = source / "heads" if isinstance(source, Path) and source.is_dir() else source
    return read_heads_table(folder, name or str(source), limits)


def read_manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / MANIFEST).read_text(encoding="utf-8"))
