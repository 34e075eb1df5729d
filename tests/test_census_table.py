"""Census tables someone hands the page or the library: refused by what they expand to, checked column by
column, one message each (no Ray, no model: hand-built tables)."""

from __future__ import annotations

import io
import time

import numpy as np
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sinkscope.census.files import read_heads
from sinkscope.census.table import Limits
from sinkscope.core.errors import InputError

from tests.helpers import heads_table, many_rows

HOSTED = Limits(rows=300_000, decoded_bytes=64 << 20)


def parquet(table: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    table.to_parquet(buffer)
    return buffer.getvalue()


def test_a_valid_table_reads_back_typed() -> None:
    table = heads_table()
    read = read_heads(parquet(table), "heads.parquet", HOSTED)
    pd.testing.assert_frame_equal(read, table[list(read.columns)], check_dtype=False)
    assert read["length"].dtype == np.int64 and read["sink"].dtype == np.float64


def test_a_few_kilobytes_of_millions_of_rows_are_refused_from_the_metadata_at_once() -> None:
    data = many_rows(15_000_000)
    assert len(data) < 200 * 1024  # under the hosted upload limit: the bytes alone do not tell
    memory = psutil.Process()
    before, started = memory.memory_info().rss, time.perf_counter()
    with pytest.raises(InputError, match=r"15,000,000 rows.*at most 300,000 rows"):
        read_heads(data, "tiny.parquet", HOSTED)
    assert time.perf_counter() - started < 1.0
    assert memory.memory_info().rss - before < 50 << 20  # nothing decoded


def test_the_decoded_size_is_bounded_too() -> None:
    with pytest.raises(InputError, match="decompresses to"):
        read_heads(parquet(heads_table()), "heads.parquet", Limits(rows=1000, decoded_bytes=1024))


@pytest.mark.parametrize(
    ("column", "values", "said"),
    [
        ("sink", "high", "column sink holds (large_)?string, not number"),
        ("sink", [[0.1, 0.2]] * 540, "column sink holds list<element: double>, not number"),
        ("length", "128", "column length holds (large_)?string, not integer"),
        ("length", [128.0] * 539 + [None], "column length holds double, not integer"),
        ("doc_id", [None] * 540, "column doc_id holds null, not text"),
        ("kind", "<script>", "column kind holds '<script>', which is not sink, diagonal, previous_token, mixed"),
        ("sink", [np.inf] * 540, "column sink holds inf, which is not number"),
    ],
)
def test_wrong_column_types_and_values_get_one_message_naming_the_column(
    column: str, values: object, said: str
) -> None:
    with pytest.raises(InputError, match=said.replace("<e", r"\<e").replace("<s", r"\<s")):
        read_heads(parquet(heads_table().assign(**{column: values})), "heads.parquet", HOSTED)


def test_empty_identity_cells_and_missing_columns_are_named() -> None:
    table = pa.Table.from_pandas(heads_table()).set_column(2, "doc_id", pa.array(["a"] * 539 + [None]))
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    with pytest.raises(InputError, match=r"column doc_id has 1 empty cell\.$"):
        read_heads(buffer.getvalue(), "heads.parquet", HOSTED)
    with pytest.raises(InputError, match=r"not a census heads table \(missing columns: layer\)"):
        read_heads(parquet(heads_table().drop(columns="layer")), "heads.parquet", HOSTED)


def test_a_table_with_no_rows_or_a_sink_column_of_nan_is_refused_for_what_it_is() -> None:
    with pytest.raises(InputError, match="heads.parquet is a census heads table with no rows"):
        read_heads(parquet(heads_table().iloc[:0]), "heads.parquet", HOSTED)
    with pytest.raises(InputError, match="column sink has 540 empty cells"):  # it was drawn as a 0 % sink rate
        read_heads(parquet(heads_table().assign(sink=np.nan)), "heads.parquet", HOSTED)


def test_a_missing_metric_is_nan_but_a_table_written_before_learned_sink_reads_as_zero() -> None:
    old = heads_table().drop(columns="learned_sink").assign(previous_token=np.nan)
    read = read_heads(parquet(old), "old.parquet", HOSTED)
    assert (read["learned_sink"] == 0).all() and read["previous_token"].isna().all()


@pytest.mark.parametrize("data", [b"not parquet at all", parquet(heads_table())[:-100]])
def test_a_file_that_is_not_parquet_or_is_cut_short_is_unreadable(data: bytes) -> None:
    with pytest.raises(InputError, match="Cannot read the census broken.parquet"):
        read_heads(data, "broken.parquet", HOSTED)


def test_a_long_string_repeated_by_its_dictionary_is_refused_by_what_it_expands_to() -> None:
    """Issue 54: 30,000 rows sharing one dictionary-encoded 20,000-character doc_id declared 56 KB uncompressed and
    took the server from 1.5 to 2.5 GB; its expansion (600 MB) is counted before a row is materialized (30,240
    rows here)."""
    table = pa.Table.from_pandas(pd.concat([heads_table()] * 56, ignore_index=True), preserve_index=False)
    rows = table.num_rows
    long_id = pa.DictionaryArray.from_arrays(np.zeros(rows, np.int8), ["x" * 20_000])
    table = table.set_column(table.schema.get_field_index("doc_id"), "doc_id", long_id)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    assert len(buffer.getvalue()) < 200 * 1024
    memory = psutil.Process()
    before = memory.memory_info().rss
    with pytest.raises(InputError, match=r"decompresses to \d+ MB"):
        read_heads(buffer.getvalue(), "ids.parquet", HOSTED)
    assert memory.memory_info().rss - before < 100 << 20  # refused before the strings were made
