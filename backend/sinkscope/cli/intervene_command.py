"""``sinkscope intervene``: break one mechanism and print the loss and predictions before and after."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sinkscope.cli.arguments import UsageError, finite, ids_of, load, model_options, ranged, text_options
from sinkscope.core.i18n import state

FORCE_CHOICES = {
    f"{source}-to-{target}": (source, target)
    for source in ("sink", "diagonal", "all")
    for target in ("sink", "diagonal", "uniform")
    if source != target
}
ESCAPES = {"\\n": "\n", "\\t": "\t", "\\s": " "}


def parse_layers(spec: str | None, n_layers: int) -> tuple[int, ...]:
    """'2-29', '1,3,5' or None (every layer) -> sorted layer indices, checked against the model."""
    if not spec:
        return tuple(range(n_layers))
    layers: set[int] = set()
    try:
        for part in spec.split(","):
            low, _, high = part.strip().partition("-")
            layers.update(range(int(low), int(high or low) + 1))
    except ValueError as err:
        raise UsageError(f"--layers '{spec}' is not a list like 2-29 or 1,3,5.") from err
    if not layers or min(layers) < 0 or max(layers) >= n_layers:
        raise UsageError(f"--layers '{spec}' is outside this model's layers 0-{n_layers - 1}.")
    return tuple(sorted(layers))


def _changes(args: argparse.Namespace, loaded: object, ids: list[int]) -> list[object]:
    from sinkscope.core.capture import analyze_ids
    from sinkscope.experiments import interventions as iv

    asked = parse_layers(args.layers, loaded.info.n_layers)
    layers = tuple(layer for layer in asked if loaded.info.attends(layer))  # a Mamba layer has no key to drop
    if not layers:
        raise UsageError(f"--layers '{args.layers}': none of these layers has attention in this model.")
    if args.drop_first is not None and args.drop_first >= len(ids):
        raise UsageError(f"--drop-first {args.drop_first} drops every key of this {len(ids)}-token text.")
    if args.from_layer > loaded.info.n_layers:
        raise UsageError(
            f"--from-layer {args.from_layer} is past this model's last layer output ({state(loaded.info.n_layers)})."
        )
    changes: list[object] = []
    if args.drop_first:
        changes.append(iv.DropFirst(args.drop_first, layers))
    if args.replace_first is not None:
        text = ESCAPES.get(args.replace_first, args.replace_first)
        changes.append(iv.single_token(loaded, text))
    if args.zero_massive or args.mean_massive or args.force:
        trace = analyze_ids(loaded, ids)
        for mode, asked in (("zero", args.zero_massive), ("mean", args.mean_massive)):
            if asked:
                changes.append(iv.set_massive(loaded, trace.massive, mode, args.from_layer, ids[0] == _bos(loaded)))
        if args.force:
            source, target = FORCE_CHOICES[args.force]
            changes.append(iv.ForceHeads(iv.heads_of_kind(trace.heads["kind"], source, layers), target))
    return changes


def _bos(loaded: object) -> int | None:
    return getattr(loaded.tokenizer, "bos_token_id", None)


def outcome_json(label: str, outcome: object, intact: object) -> dict[str, object]:
    return {
        "label": label,
        "loss": outcome.loss,
        "loss_change": outcome.loss - intact.loss,
        "mean_sink": float(np.nanmean(outcome.heads["sink"])),  # over the layers with attention
        "sink_per_layer": [finite(float(v)) for v in outcome.heads["sink"].mean(-1)],  # null: no attention
        "token_cosine": [finite(float(v)) for v in outcome.token_cosine],
        "token_cosine_scaled": [finite(float(v)) for v in outcome.token_cosine_scaled],
        "top": [{"token": token, "probability": p} for token, p in outcome.top],
    }


def _line(label: str, outcome: object, intact: object) -> str:
    top = "  ".join(f"{token} {p:.2f}" for token, p in outcome.top)
    delta = outcome.loss - intact.loss
    sink = np.nanmean(outcome.heads["sink"])  # over the layers with attention
    return f"{label:60s} loss {outcome.loss:7.3f} ({delta:+.3f})  sink {sink:.3f}  {top}"


def run(args: argparse.Namespace) -> None:
    from sinkscope.experiments import interventions as iv

    loaded = load(args)
    ids = ids_of(args, loaded)
    changes = _changes(args, loaded, ids)
    if not changes and args.perturb is None:
        raise UsageError("Choose at least one intervention: --drop-first, --replace-first, --zero-massive, "
                         "--mean-massive, --force or --perturb.")  # fmt: skip
    print(f"model: {loaded.info.badge()}\n{len(ids)} tokens")
    intact = iv.outcome(loaded, ids)
    runs = [("intact", intact)] + [(change.label, iv.outcome(loaded, ids, change)) for change in changes]
    for label, outcome in runs:
        print(_line(label, outcome, intact))
    report = {"model": loaded.info.__dict__, "n_tokens": len(ids), "intact": outcome_json("intact", intact, intact)}
    report["interventions"] = [outcome_json(label, outcome, intact) for label, outcome in runs[1:]]
    if args.perturb is not None:
        report["sensitivity"] = _sensitivity(loaded, ids, args.perturb, args.size, print)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def _sensitivity(
    loaded: object, ids: list[int], position: int, size: float, say: Callable[[str], None]
) -> dict[str, object]:
    from sinkscope.experiments import interventions as iv

    absolute = size * iv.embedding_scale(loaded, ids)
    kl = iv.sensitivity(loaded, ids, [0, position], absolute)
    say(f"perturbation of length {absolute:.3f} ({size:g} x the median embedding norm), mean KL of later predictions:")
    for at, value in kl.items():
        say(f"  token {at:5d}  KL {value:.5f}")
    return {"size": absolute, "kl": {str(at): value for at, value in kl.items()}}


def add(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("intervene", help="break a mechanism; loss and predictions before and after")
    model_options(command)
    text_options(command)
    command.add_argument("--layers", help="layers for --drop-first and --force, like 2-29 or 1,3 (default all)")
    command.add_argument(
        "--drop-first", type=ranged("drop_first"), metavar="K", help="remove attention to the first K tokens"
    )
    command.add_argument("--replace-first", metavar="TOKEN", help=r"replace token 0 by one token (\n, \s, a word)")
    command.add_argument("--zero-massive", action="store_true", help="set massive activations to zero")
    command.add_argument("--mean-massive", action="store_true", help="set them to their mean over other texts")
    command.add_argument(
        "--from-layer", type=ranged("from_layer"), default=1, help="massive edits start at this layer's output"
    )
    command.add_argument(
        "--force", choices=list(FORCE_CHOICES), help="make heads of one kind (or all) attend as another"
    )
    command.add_argument(
        "--perturb", type=ranged("position"), metavar="POS", help="compare perturbing token 0 with token POS"
    )
    command.add_argument(
        "--size", type=ranged("size", float), default=1.0, help="perturbation length / median embedding norm"
    )
    command.add_argument("--json", help="write everything as JSON here")
    command.set_defaults(run=run)
