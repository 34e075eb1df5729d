"""The command line: ``sinkscope analyze|stream|intervene|lab|cost|census|figure|kv ...`` (or ``python -m sinkscope``).

Errors a user can fix print one ``error:`` line and exit 2; nothing prints a traceback unless --debug.
Building the parser imports no torch, so ``sinkscope --help`` answers at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from sinkscope.cli import (
    analyze_command,
    census_command,
    cost_command,
    figure_command,
    intervene_command,
    kv_command,
    lab_command,
    stream_command,
)
from sinkscope.cli.arguments import Parser, UsageError, check_outputs, writes_to
from sinkscope.core.errors import SinkscopeError


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="sinkscope", description="Sinkscope: measure attention sinks.")
    root.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = root.add_subparsers(dest="command", required=True)
    for command in (analyze_command, stream_command, lab_command, intervene_command, cost_command, census_command,
                    figure_command, kv_command):  # fmt: skip
        command.add(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(message)s", stream=sys.stderr, force=True)
    logging.getLogger("sinkscope").setLevel(logging.INFO)  # our progress lines; Kaleido's chatter stays out
    # Chromium's pipe sometimes splits a message; choreographer ignores it but logs a traceback as an error
    logging.getLogger("choreographer").setLevel(logging.CRITICAL)
    if not args.debug:  # transformers' warnings about a family's slow fallbacks are not the command's to say
        from transformers.utils import logging as hf_logging  # here: --help and the census need no transformers

        hf_logging.set_verbosity_error()
    try:
        check_outputs(args)
        args.run(args)
    except (SinkscopeError, UsageError) as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError, MemoryError) as err:
        if args.debug:
            raise
        if isinstance(err, OSError) and writes_to(args, err.filename):  # a read-only folder, /proc: the user's
            print(f"error: cannot write {err.filename}: {err.strerror}.", file=sys.stderr)
            return 2
        print(f"error: {type(err).__name__}: {err} (rerun with --debug for details)", file=sys.stderr)
        return 1
    return 0
