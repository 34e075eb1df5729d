"""What every subcommand shares: reading the text, writing CSV and JSON, the model and text options.

Imports no torch: ``sinkscope --help`` must answer at once.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from sinkscope.core.bundled import DEFAULT_MODEL
from sinkscope.core.errors import TokenLimitError
from sinkscope.core.names import DEVICES
from sinkscope.core.tokens import decode_text

log = logging.getLogger("sinkscope")
MAX_FILE_BYTES = 5_000_000


class UsageError(Exception):
    """A command-line mistake: printed as one ``error:`` line (in English, like the whole CLI), exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one ``error:`` line (no usage block) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def number(kind: type, low: float | None = None, high: float | None = None, strict: bool = False) -> Callable:
    """An argparse type: a finite int or float within [low, high] (``strict``: the ends excluded)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {'an integer' if kind is int else 'a number'}") from None
        too_low = low is not None and (value <= low if strict else value < low)
        too_high = high is not None and (value >= high if strict else value > high)
        if not math.isfinite(value) or too_low or too_high:
            raise argparse.ArgumentTypeError(f"{text} must be {_bounds(low, high, strict)}")
        return value

    return parse


def ranged(name: str, kind: type = int) -> Callable:
    """An argparse type for the argument ``name`` of ``sinkscope.core.ranges``: the library's own range."""
    from sinkscope.core.ranges import RANGES

    return number(kind, RANGES[name].low, RANGES[name].high)


def _bounds(low: float | None, high: float | None, strict: bool) -> str:
    if low is not None and high is not None:
        return f"between {low} and {high}" + (" (both excluded)" if strict else "")
    if low is not None:
        return f"{'above' if strict else 'at least'} {low}"
    return f"{'below' if strict else 'at most'} {high}"


OUTPUT_FILES = ("json", "heads_csv", "layers_csv", "csv", "per_token_csv")


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse output paths that cannot be written, before any work is done."""
    for name in OUTPUT_FILES:
        path = getattr(args, name, None)
        if path is None:
            continue
        target = Path(path)
        if target.is_dir():
            raise UsageError(f"--{name.replace('_', '-')} {path} is a folder; give a file name.")
        if not target.parent.is_dir():
            raise UsageError(f"--{name.replace('_', '-')} {path}: the folder {target.parent} does not exist.")
    save = getattr(args, "save", None)
    if save is not None and Path(save).exists() and not Path(save).is_dir():
        raise UsageError(f"--save {save} is a file; give a folder.")


def writes_to(args: argparse.Namespace, filename: object) -> bool:
    """Whether ``filename`` is one of the outputs the user named, or lies in an output folder (--out, --save)."""
    if not filename:
        return False
    path = Path(str(filename)).absolute()
    files = [getattr(args, name, None) for name in OUTPUT_FILES]
    folders = [getattr(args, name, None) for name in ("out", "save")]
    named = [Path(p).absolute() for p in files if p]
    inside = [Path(p).absolute() for p in folders if p]
    return path in named or any(path == folder or folder in path.parents for folder in inside)


def read_text_file(path: str) -> str:
    """The UTF-8 text of a file, or an error that says what is wrong with it."""
    try:
        with open(path, "rb") as file:  # a pipe (/dev/stdin) too: read up to the limit, never to the end of it
            data = file.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError as err:
        raise UsageError(f"Cannot read '{path}': it is a folder; pass a text file.") from err
    except OSError as err:
        raise UsageError(f"Cannot read '{path}': {os.strerror(err.errno or 0).lower()}.") from err
    if len(data) > MAX_FILE_BYTES:
        raise UsageError(f"'{path}' is larger than {MAX_FILE_BYTES // 1_000_000} MB; pass a shorter text.")
    return decode_text(data, path, MAX_FILE_BYTES)


def the_text(args: argparse.Namespace) -> str:
    """--text or the contents of --text-file."""
    return read_text_file(args.text_file) if args.text_file else args.text


def ids_of(args: argparse.Namespace, loaded: object) -> list[int]:
    """The text's token ids within the model's limit; --max-tokens N keeps only the first N."""
    try:
        return loaded.encode(the_text(args) or "", args.max_tokens, truncate=args.max_tokens is not None)
    except TokenLimitError as err:
        raise UsageError(f"{err} Pass --max-tokens N to use only the first N tokens.") from err


def load(args: argparse.Namespace) -> object:
    """The model the options name, loaded with progress on stderr."""
    from sinkscope.core.models import load_model

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
    command.add_argument("--device", default="auto", choices=DEVICES, help="auto (the default), cpu, cuda or mps")
    command.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")


def text_options(command: argparse.ArgumentParser) -> None:
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text itself")
    source.add_argument("--text-file", help="a UTF-8 text file")
    command.add_argument("--max-tokens", type=ranged("max_tokens"), help="use only the first N tokens")
