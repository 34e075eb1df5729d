"""A local model folder, checked before transformers is trusted with it: each problem is one sentence naming
the file, never a traceback from deep inside a loader."""

from __future__ import annotations

import os
import pickle
import stat
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from sinkscope.core.errors import ModelLoadError, reason_of, shortened

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def looks_local(spec: str) -> bool:
    """Whether ``spec`` names a path on this machine rather than a hub id: absolute, relative (./, ../, ~), or
    starting with something that exists here (a link included, even a broken one)."""
    if spec.startswith(("/", ".", "~")):
        return True
    first = spec.split("/", 1)[0]
    try:
        return os.path.lexists(first)
    except (OSError, ValueError):
        return False


def check_folder(path: Path) -> None:
    """A ModelLoadError unless ``path`` is a folder (what is in it is ``check_files``'s)."""
    try:
        mode = os.stat(path).st_mode  # follows links: a loop is ELOOP here
    except (OSError, ValueError) as err:
        reason = os.strerror(err.errno) if isinstance(err, OSError) and err.errno else reason_of(err)
        raise ModelLoadError("error.model_path", path=shortened(str(path)), reason=reason) from err
    if not stat.S_ISDIR(mode):
        raise ModelLoadError("error.not_a_folder", path=shortened(str(path)))


def check_files(path: Path) -> None:
    """A ModelLoadError unless the folder's weight files can be read and parsed and it has a tokenizer."""
    for file in sorted(f for pattern in WEIGHT_PATTERNS for f in path.glob(pattern)):
        check_weights_file(file)
    if not any((path / name).exists() for name in TOKENIZER_FILES) and not any(path.glob("*.tiktoken")):
        raise ModelLoadError("error.no_tokenizer", path=str(path), files=", ".join(TOKENIZER_FILES))


def check_weights_file(file: Path) -> None:
    """One weights file: readable, not empty, and a safetensors header or a pickle of plain tensors."""
    try:
        with file.open("rb") as handle:
            empty = not handle.read(1)
    except OSError as err:
        raise ModelLoadError("error.model_file", file=str(file), reason=os.strerror(err.errno or 0)) from err
    if empty:
        raise ModelLoadError("error.empty_weights", file=str(file))
    try:
        _parse(file)
    except pickle.UnpicklingError as err:  # weights_only refused an object: the file is code, not only tensors
        raise ModelLoadError("error.pickled_code", file=str(file)) from err
    except (SafetensorError, RuntimeError, OSError, EOFError, ValueError) as err:
        kind = "safetensors" if file.suffix == ".safetensors" else "PyTorch"
        raise ModelLoadError("error.corrupt_weights", file=str(file), format=kind, reason=reason_of(err)) from err


def _parse(file: Path) -> None:
    """Read the file's table of tensors without their data (safetensors' header; a pickle mapped, onto meta)."""
    if file.suffix == ".safetensors":
        with safe_open(file, framework="pt") as weights:
            weights.keys()
        return
    torch.load(file, map_location="meta", weights_only=True, mmap=zipfile.is_zipfile(file))  # mmap: zip format only
