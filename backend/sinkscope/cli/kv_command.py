"""``sinkscope kv``: a text's perplexity under a quantized KV cache, for each bits x protection, against the dense
float cache; with ``--budget``, the eviction policies at that cache size, and with ``--heads`` each head's need of
the whole context at that size and DuoAttention's policy built from it; with ``--figures``, each as PNG and SVG for
slides, in the language asked."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from sinkscope.cli.arguments import UsageError, ids_of, load, model_options, ranged, text_options, the_text, write_csv
from sinkscope.core.bundled import shown_label
from sinkscope.core.i18n import LANGUAGES
from sinkscope.findings import words

log = logging.getLogger(__name__)
COLUMNS = ("bits", "protect", "residual", "perplexity")
EVICT_COLUMNS = ("policy", "budget", "perplexity", "first_kept")
HEAD_COLUMNS = ("layer", "head", "loss_change", "low", "high", "estimated", "needs_context", "within_noise")
DUO_COLUMNS = ("order", "whole_kv_heads", "cache_kept", "perplexity", "dense")


def listed(value: str, allowed: tuple, kind: type, name: str) -> tuple:
    """A comma list of ``allowed`` values, in the order given."""
    try:
        found = tuple(kind(part.strip()) for part in value.split(",") if part.strip())
    except ValueError:
        found = ()
    wrong = [str(v) for v in found if v not in allowed]
    if not found or wrong:
        raise UsageError(f"--{name} {value}: choose from {', '.join(map(str, allowed))}.")
    return found


def flags(args: argparse.Namespace) -> tuple[tuple[int, ...], tuple[str, ...], Path]:
    """The bits, the protections and the output folder, every flag checked before a model (or torch) loads."""
    from sinkscope.experiments import kv_settings

    bits = listed(args.bits, kv_settings.BITS, int, "bits")
    if args.residual < 0 or args.residual % kv_settings.GROUP:
        raise UsageError(f"--residual {args.residual}: 0 or a multiple of {kv_settings.GROUP} (KIVI quantizes keys "
                         "a whole group at a time).")  # fmt: skip
    protections = listed(args.protect, kv_settings.PROTECTIONS, str, "protect")
    if not args.out.strip():
        raise UsageError("--out is empty: name the folder to write kv.csv in.")
    out = Path(args.out)
    if args.heads and args.budget is None:
        raise UsageError("--heads needs --budget: the cache size each head is restricted to.")
    if args.exact and not args.heads:
        raise UsageError("--exact is a way to run --heads: give --heads too.")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out} is a file, not a folder.")
    return bits, protections, out


def run(args: argparse.Namespace) -> None:
    bits, protections, out = flags(args)
    from sinkscope.core.capture import analyze_ids
    from sinkscope.experiments import kv_quant
    from sinkscope.plot import export, kv_slides

    if args.figures and not export.available():
        raise UsageError("figures need Chromium for Plotly's static export: apt-get install chromium, or BROWSER_PATH.")
    loaded = load(args)
    ids = ids_of(args, loaded)
    refused = measurable(len(ids), args.budget)
    if refused is not None:
        raise UsageError(refused)
    trace = analyze_ids(loaded, ids)
    print(f"model: {loaded.info.badge()}\n{trace.n_tokens} tokens; sinks kept by 'sinks': "
          f"{', '.join(map(str, kv_quant.detected_sinks(trace)))}")  # fmt: skip
    residual = None if args.bound else args.residual
    rows, table = [], kv_quant.quantized_table(loaded, trace, bits, protections, residual)
    for row in table:
        shown = {
            "bits": row.bits or "dense",
            "protect": row.protect if row.bits else "-",
            "residual": "bound" if row.residual is None else row.residual,
            "perplexity": row.perplexity,
        }
        rows.append(shown)
        print(f"{shown['bits']!s:>6}  {shown['protect']:7s}  ppl {row.perplexity:10.3f}")
    out.mkdir(parents=True, exist_ok=True)
    write_csv(str(out / "kv.csv"), COLUMNS, rows)
    print(out / "kv.csv")
    figures = {"kv_curves": kv_slides.quantized_curves(table, lang=args.lang)} if len(table) > 1 else {}
    if args.budget is not None:
        found = evictions(loaded, list(trace.token_ids), args.budget, out)
        figures |= kv_slides.eviction_figures(found, list(trace.tokens), lang=args.lang)
    if args.heads:
        needs, curve = heads(loaded, list(trace.token_ids), args.budget, out, args.exact)
        figures |= {"kv_heads_map": kv_slides.needs_map(needs, lang=args.lang),
                    "kv_duo": kv_slides.duo_curve(curve, lang=args.lang)}  # fmt: skip
    if args.figures:
        captions = export.captions(figures, shown_label(loaded.info.label, args.lang), the_text(args))
        for path in export.write_all(figures, captions, out, ("png", "svg")):
            print(path)


def measurable(n_tokens: int, budget: int | None) -> str | None:
    """Why the text cannot be measured as asked (one line), before any of it runs; None when it can."""
    from sinkscope.experiments import kv_evict

    if n_tokens < 2:
        return f"the text has {n_tokens} token: a cache is measured by the next tokens it predicts, so give it two."
    refusal = kv_evict.cache_refusal(n_tokens, budget) if budget is not None else None
    return f"--budget {budget}: {refusal.text()}" if refusal is not None else None


def evictions(loaded: object, ids: list[int], budget: int, out: Path) -> object:
    """The eviction policies at ``budget`` over the text: DIR/evict.csv, one row per policy."""
    from sinkscope.experiments import kv_evict

    found = kv_evict.evict(loaded, ids, budget)
    rows = [{"policy": policy, "budget": budget, "perplexity": found.perplexity(lane),
             "first_kept": float(found.first_kept[lane])} for lane, policy in enumerate(found.policies)]  # fmt: skip
    for row in rows:
        print(f"{row['policy']:13s} cache {budget:5d}  ppl {row['perplexity']:10.3f}  first token kept "
              f"{100 * row['first_kept']:5.1f}%")  # fmt: skip
    write_csv(str(out / "evict.csv"), EVICT_COLUMNS, rows)
    print(out / "evict.csv")
    return found


def heads(loaded: object, ids: list[int], budget: int, out: Path, exact: bool = False) -> tuple:
    """Each head alone restricted to sinks + window (DIR/heads.csv): estimated, then exact where the estimate cannot
    place a head (every head exact with ``exact``); and DuoAttention's policy curve (DIR/duo.csv)."""
    import numpy as np

    from sinkscope.core.loss import LEVEL
    from sinkscope.experiments import kv_heads

    def layer_done(so_far: kv_heads.HeadNeeds) -> bool:
        log.info("heads: %d of %d exact", int((so_far.measured & ~so_far.estimates).sum()), so_far.change.size)
        return True

    if exact:
        needs = kv_heads.head_needs(loaded, ids, budget, layer_done)
    else:
        first = kv_heads.estimate_needs(loaded, ids, budget)
        log.info("heads: estimated; %d to measure exactly", int(first.unsettled().sum()))
        needs = kv_heads.confirm_needs(loaded, ids, first, layer_done)
    retrieval, noise = needs.needs_context(), needs.within_noise()
    rows = [{"layer": layer, "head": head, "loss_change": float(change), "low": float(needs.low[layer, head]),
             "high": float(needs.high[layer, head]), "estimated": bool(needs.estimates[layer, head]),
             "needs_context": bool(retrieval[layer, head]),
             "within_noise": bool(noise[layer, head])}
            for (layer, head), change in np.ndenumerate(needs.change)]  # fmt: skip
    write_csv(str(out / "heads.csv"), HEAD_COLUMNS, rows)
    print(f"{int(retrieval.sum())} of {retrieval.size} heads need more than sinks + window (over "
          f"{100 * words.NEEDS_CONTEXT:g}% perplexity each, across the {100 * LEVEL:g}% interval); "
          f"{int(noise.sum())} within the noise of that threshold; {int(needs.estimates.sum())} estimated to first "
          f"order, far from it, the rest exact; {out / 'heads.csv'}")  # fmt: skip
    curve = kv_heads.policy_curve(loaded, kv_heads.held_out_ids(loaded, len(ids)), needs)  # a text the map never saw
    duo = [{"order": order, "whole_kv_heads": policy.retrieval_share, "cache_kept": policy.cache_share,
            "perplexity": policy.perplexity, "dense": policy.dense_perplexity}
           for order, policies in curve.items() for policy in policies]  # fmt: skip
    for row in duo:
        print(f"{row['order']:6s} whole {100 * row['whole_kv_heads']:5.1f}%  cache {100 * row['cache_kept']:5.1f}%  "
              f"ppl {row['perplexity']:10.3f}")  # fmt: skip
    write_csv(str(out / "duo.csv"), DUO_COLUMNS, duo)
    print(out / "duo.csv")
    return needs, curve


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("kv", help="perplexity under a quantized KV cache, with and without its sinks")
    model_options(command)
    text_options(command)
    command.add_argument("--bits", default="2,3,4,8", help="comma-separated: 2, 3, 4, 8")
    command.add_argument("--protect", default="none,first4,sinks",
                         help="tokens kept in full precision: none, first4, sinks (the detected sinks)")  # fmt: skip
    command.add_argument("--residual", type=int, default=32, help="KIVI's full-precision window R in tokens: 0 or a "
                         "multiple of 32 (the group); a key is read quantized once its block of R is full, a value "
                         "once R newer tokens follow")  # fmt: skip
    command.add_argument("--bound", action="store_true", help="instead, the old non-causal cache: every token "
                         "quantized at once over its whole group (a pessimistic bound)")  # fmt: skip
    command.add_argument("--budget", type=ranged("budget"), help="also run the eviction policies at this cache size "
                         "(DIR/evict.csv: policy, budget, perplexity, first_kept)")  # fmt: skip
    command.add_argument("--heads", action="store_true", help="with --budget: each head alone restricted to sinks + "
                         "window (DIR/heads.csv) and DuoAttention's policy curve (DIR/duo.csv)")  # fmt: skip
    command.add_argument("--exact", action="store_true", help="with --heads: every head measured exactly, layer by "
                         "layer, without the first-order estimate that orders the work")  # fmt: skip
    command.add_argument("--figures", action="store_true", help="also write each figure as PNG and SVG in DIR")
    command.add_argument("--lang", default="en", choices=list(LANGUAGES), help="the figures' language")
    command.add_argument("--out", required=True, help="the folder to write kv.csv in (made if missing)")
    command.set_defaults(run=run)
