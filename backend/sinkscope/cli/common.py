"""What every subcommand shares: reading the text, writing CSV and JSON, the model and text options.

Imports no torch: ``sinkscope --help`` must answer at once.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
from collections.abc import Sequence
from pathlib import Path

from sinkscope.bundled import DEFAULT_MODEL
from sinkscope.errors import TokenLimitError
from sinkscope.tokens import decode_text

log = logging.getLogger("sinkscope")
MAX_FILE_BYTES = 5_000_000


class UsageError(Exception):
    """A command-line mistake: printed as one ``error:`` line (in English, like the whole CLI), exit 2."""


def read_text_file(path: str) -> str:
    """The UTF-8 text of a file, or an error that says what is wrong with it."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"Cannot read '{path}': no such file.")
    if file.stat().st_size > MAX_FILE_BYTES:
        raise UsageError(f"'{path}' is larger than {MAX_FILE_BYTES // 1_000_000} MB; pass a shorter text.")
    return decode_text(file.read_bytes(), path, MAX_FILE_BYTES)


def the_text(args: argparse.Namespace) -> str:
    """--text or the contents of --text-file."""
    return read_text_file(args.text_file) if args.text_file else args.text


def ids_of(args: argparse.Namespace, loaded: object) -> list[int]:
    """The text's token ids within the model's limit; --max-tokens N keeps only the first N."""
    from sinkscope.tokens import encode

    limit = min(args.max_tokens or loaded.info.max_tokens, loaded.info.max_tokens)
    try:
        return encode(loaded.tokenizer, the_text(args) or "", limit, truncate=args.max_tokens is not None)
    except TokenLimitError as err:
        raise UsageError(f"{err} Pass --max-tokens N to use only the first N tokens.") from err


def load(args: argparse.Namespace) -> object:
    """The model the options name, loaded with progress on stderr."""
    from sinkscope.models import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype, progress=log.info)


def write_csv(path: str, columns: Sequence[str], rows: list[dict[str, object]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def finite(value: object) -> object:
    """JSON has no NaN: write null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def model_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--model", default=DEFAULT_MODEL, help="bundled key, hub id or local directory")
    command.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    command.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")


def text_options(command: argparse.ArgumentParser) -> None:
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text itself")
    source.add_argument("--text-file", help="a UTF-8 text file")
    command.add_argument("--max-tokens", type=int, help="use only the first N tokens")
