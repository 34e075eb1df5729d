"""``sinkscope figure``: a text's figures for slides (head map, kinds, depth, a sink head, a diagonal head, the key
map, the first token's writes, the strongest sink head's QK terms), as PNG and SVG with a caption line, in the
language asked."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sinkscope.cli.arguments import UsageError, ids_of, load, model_options, text_options, the_text
from sinkscope.core.bundled import shown_label
from sinkscope.core.i18n import LANGUAGES


def formats(args: argparse.Namespace) -> tuple[str, ...]:
    """The formats asked for (--png, --svg); both when neither is."""
    from sinkscope.plot.export import FORMATS

    return tuple(fmt for fmt in FORMATS if getattr(args, fmt)) or FORMATS


def out_folder(value: str) -> Path:
    """The figures' folder, checked before the model loads: named, a folder if it exists, or made in a writable one."""
    if not value.strip():
        raise UsageError("--out names no folder: give the folder to write the figures in.")
    folder = Path(value)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--out {value} is a file, not a folder.")
    existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
    if not os.access(existing, os.W_OK):
        raise UsageError(f"--out {value}: cannot write into {existing}.")
    return folder


def strongest_terms(loaded: object, trace: object) -> object | None:
    """The strongest sink head's QK attribution, or None where the model's family has none (a post-norm block, fused
    keys, the slow path, a hybrid)."""
    from sinkscope.core.errors import SinkscopeError
    from sinkscope.experiments.qk import qk_attribution
    from sinkscope.findings.heads import strongest

    layer, head = strongest(trace.heads, "sink")
    try:
        return qk_attribution(loaded, trace.token_ids, layer, head)
    except SinkscopeError:
        return None


def run(args: argparse.Namespace) -> None:
    from sinkscope.core.capture import analyze_ids, attention_maps
    from sinkscope.plot import export, slides

    if not export.available():
        raise UsageError("figures need Chromium for Plotly's static export: apt-get install chromium, or BROWSER_PATH.")
    folder = out_folder(args.out)
    loaded = load(args)
    ids = ids_of(args, loaded)
    trace = analyze_ids(loaded, ids)
    maps = {kind: attention_maps(loaded, ids, layer).weights[head]
            for kind, (layer, head) in slides.example_heads(trace.heads).items()}  # fmt: skip
    shown = slides.figures(trace, maps, lang=args.lang, terms=strongest_terms(loaded, trace))
    captions = export.captions(shown, shown_label(loaded.info.label, args.lang), the_text(args))
    for path in export.write_all(shown, captions, folder, formats(args)):
        print(path)


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("figure", help="a text's figures for slides, as PNG and SVG with a caption")
    model_options(command)
    text_options(command)
    command.add_argument("--out", required=True, help="the folder to write the figures in (made if missing)")
    command.add_argument("--png", action="store_true", help="write PNG (with --svg: both; neither: both)")
    command.add_argument("--svg", action="store_true", help="write SVG")
    command.add_argument("--lang", default="en", choices=list(LANGUAGES), help="the figures' language")
    command.set_defaults(run=run)
