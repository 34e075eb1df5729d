"""Reading a census heads table someone hands us (an upload, a file, a census folder): bounded by what it
expands to, and checked once, column by column, before any statistic sees it.

A few kilobytes of Parquet can hold millions of rows (a constant column compresses to almost nothing), so the
row count and the decoded size are read off each file's metadata and checked against the caller's limits
before anything is decoded; the table is then read one row group at a time, only the columns the census uses.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pandas as pd

from sinkscope.core.errors import InputError, reason_of
from sinkscope.core.names import HEAD_METRICS, KINDS

TEXT, INTEGER, NUMBER = "text", "integer", "number"
COLUMNS = {
    "model": TEXT, "length": INTEGER, "doc_id": TEXT, "start": INTEGER, "layer": INTEGER, "head": INTEGER,
    **dict.fromkeys(HEAD_METRICS, NUMBER), "kind": TEXT,
}  # fmt: skip
MEASURED = ("sink", "diagonal", "entropy")  # every head of a window of 2 tokens or more has these: NaN is no census
OPTIONAL = {"learned_sink": 0.0}  # added in 0.3: a table written before it measured plain softmax, which takes 0
PARTITIONS = ("model", "length")  # a census folder's path: heads/model=<name>/length=<n>/part-<id>.parquet


@dataclass(frozen=True)
class Limits:
    """What one table may expand to: rows, and bytes once decompressed (the sizes Parquet's metadata states)."""

    rows: int
    decoded_bytes: int


def read_heads_table(source: Path | bytes, name: str, limits: Limits) -> pd.DataFrame:
    """A heads table from one Parquet file (a path or an upload's bytes) or a census folder's ``heads``, within
    ``limits``, every column checked: an InputError naming the file and the column otherwise."""
    import pyarrow as pa

    try:
        parts = _parts(source)
        _check_size(parts, name, limits)
        frames = [_read_part(file, partitions, name, limits) for file, partitions in parts]
    except (OSError, ValueError, pa.ArrowException) as err:  # ArrowInvalid: not Parquet, or a corrupt file
        if isinstance(err, InputError):
            raise
        raise InputError("error.census_unreadable", path=name, reason=reason_of(err)) from err
    if not frames or not sum(len(frame) for frame in frames):
        raise InputError("error.census_no_rows", path=name)
    return check_values(pd.concat(frames, ignore_index=True), name)


def _parts(source: Path | bytes) -> list[tuple[Any, dict[str, str]]]:
    """(Parquet file, partition values from its path) for every part: one for a file, many for a folder."""

    if isinstance(source, bytes):
        return [(_opened(lambda: io.BytesIO(source)), {})]
    if not source.is_dir():
        return [(_opened(lambda: source), {})]
    files = sorted(p for p in source.rglob("*.parquet") if not p.name.startswith("."))  # hidden: being written
    return [(_opened(lambda path=path: path), _partitions(path.relative_to(source))) for path in files]


def _opened(source: Callable[[], Any]) -> Any:
    """A Parquet file whose text columns read as dictionaries (see _text_bytes): its schema, from the footer, says
    which of them it holds (a census folder's model and length live in its path)."""
    import pyarrow.parquet as pq

    names = set(pq.ParquetFile(source()).schema_arrow.names)
    return pq.ParquetFile(source(), read_dictionary=[c for c, kind in COLUMNS.items() if kind == TEXT and c in names])


def _partitions(relative: Path) -> dict[str, str]:
    return dict(unquote(part).split("=", 1) for part in relative.parts[:-1] if "=" in part)


def _check_size(parts: list[tuple[Any, dict[str, str]]], name: str, limits: Limits) -> None:
    """Refuse a table from its metadata alone: no row is decoded before its size is known to fit."""
    rows = sum(file.metadata.num_rows for file, _ in parts)
    if rows > limits.rows:
        raise InputError("error.census_rows", path=name, rows=rows, limit=limits.rows)
    decoded = sum(_decoded_bytes(file) for file, _ in parts)
    if decoded > limits.decoded_bytes:
        mb = 1024 * 1024
        raise InputError("error.census_decoded", path=name, mb=decoded // mb, limit=limits.decoded_bytes // mb)


def _decoded_bytes(file: Any) -> int:
    """The uncompressed bytes of the columns the census reads, summed over the file's row groups."""
    meta, wanted = file.metadata, set(COLUMNS)
    return sum(
        group.column(i).total_uncompressed_size
        for group in (meta.row_group(g) for g in range(meta.num_row_groups))
        for i in range(group.num_columns)
        if group.column(i).path_in_schema in wanted
    )


def _text_bytes(table: Any) -> int:
    """What a row group's dictionary-encoded text columns expand to: each row's string length, read off the
    dictionary, summed (a few kilobytes can repeat one long string a million times)."""
    import pyarrow.compute as pc

    total = 0
    for column in table.columns:
        for chunk in column.chunks if hasattr(column.type, "value_type") else ():
            lengths = pc.binary_length(chunk.dictionary)  # (distinct,)
            total += pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0
    return total


def _read_part(file: Any, partitions: dict[str, str], name: str, limits: Limits) -> pd.DataFrame:
    """One file's census columns, one row group at a time, after its column types are checked; its text columns
    read still encoded, and refused once they would expand past the limit."""
    schema = file.schema_arrow
    missing = [c for c in COLUMNS if c not in schema.names and c not in partitions and c not in OPTIONAL]
    if missing:
        raise InputError("error.census_not_heads", path=name, missing=", ".join(missing))
    for column, kind in COLUMNS.items():
        if column in schema.names and not _holds(schema.field(column).type, kind):
            raise InputError("error.census_column", path=name, column=column, found=str(schema.field(column).type),
                             expected=kind)  # fmt: skip
    wanted = [c for c in COLUMNS if c in schema.names]
    groups, text_bytes = [], 0
    for g in range(file.num_row_groups):
        table = file.read_row_group(g, columns=wanted)
        text_bytes += _text_bytes(table)
        if text_bytes > limits.decoded_bytes:
            mb = 1024 * 1024
            raise InputError("error.census_decoded", path=name, mb=text_bytes // mb, limit=limits.decoded_bytes // mb)
        groups.append(table.to_pandas())
    frame = pd.concat(groups, ignore_index=True) if groups else pd.DataFrame(columns=wanted)
    for column, value in partitions.items():
        if column in PARTITIONS:
            frame[column] = value
    return frame.assign(**{c: v for c, v in OPTIONAL.items() if c not in frame})


def _holds(arrow_type: Any, kind: str) -> bool:
    import pyarrow.types as types

    if types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if kind == TEXT:
        return types.is_string(arrow_type) or types.is_large_string(arrow_type)
    if kind == INTEGER:
        return types.is_integer(arrow_type)
    return types.is_floating(arrow_type) or types.is_integer(arrow_type)


def check_values(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """Every column as the statistics need it: identities whole and integers where they count, metrics finite
    or NaN (a two-token window has no previous_token) but never NaN where every window has a value (a NaN sink
    would count as a head that does not sink), kinds among the four. Returns the table, typed."""
    for column, kind in COLUMNS.items():
        values = frame[column]
        if (kind != NUMBER or column in MEASURED) and values.isna().any():
            raise InputError("error.census_nulls", path=name, column=column, n=int(values.isna().sum()))
        if kind == INTEGER:
            numbers = pd.to_numeric(values, errors="coerce")
            if numbers.isna().any() or (numbers < 0).any() or (numbers != np.floor(numbers)).any():
                bad = values[numbers.isna() | (numbers < 0)].head(1).tolist() or values.head(1).tolist()
                raise InputError("error.census_value", path=name, column=column, value=repr(bad[0]), expected=kind)
            frame[column] = numbers.astype(np.int64)
        elif kind == NUMBER:
            numbers = pd.to_numeric(values, errors="coerce").astype(np.float64)
            if np.isinf(numbers).any():
                raise InputError("error.census_value", path=name, column=column, value="inf", expected=kind)
            frame[column] = numbers
        else:
            frame[column] = values.astype(str)
    unknown = sorted(set(frame["kind"]) - set(KINDS))
    if unknown:
        raise InputError("error.census_value", path=name, column="kind", value=repr(unknown[0]),
                         expected=", ".join(KINDS))  # fmt: skip
    return frame[list(COLUMNS)]
