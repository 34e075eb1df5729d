"""Interface text in English, French and Portuguese, from one catalogue per language.

``t(key, **values)`` looks a stable key up in the calling thread's language (a context variable, so
Streamlit sessions never see each other's), falling back to English. ``num`` writes numbers the way
the language does: a decimal comma in French and Portuguese. The command line stays in English.
"""

from __future__ import annotations

import contextvars
import json
from functools import cache
from pathlib import Path

LOCALES = Path(__file__).resolve().parent / "locales"
LANGUAGES = {"en": "English", "fr": "Français", "pt": "Português"}
DEFAULT = "en"
SEPARATORS = {"en": (".", ","), "fr": (",", "\u202f"), "pt": (",", ".")}  # (decimal, thousands)
_language: contextvars.ContextVar[str] = contextvars.ContextVar("sinkscope_language", default=DEFAULT)


@cache
def catalogue(code: str) -> dict[str, str]:
    """The messages of one language, key -> text with ``{name}`` placeholders."""
    return json.loads((LOCALES / f"{code}.json").read_text(encoding="utf-8"))


def set_language(code: str) -> None:
    """Use ``code`` for the rest of this thread's run (unknown codes fall back to English)."""
    _language.set(code if code in LANGUAGES else DEFAULT)


def language() -> str:
    return _language.get()


def pick_language(*candidates: str | None) -> str:
    """The first candidate that names a supported language ('fr', 'pt-BR', 'fr-CA' ...), else English."""
    for candidate in candidates:
        code = (candidate or "").strip().lower()[:2]
        if code in LANGUAGES:
            return code
    return DEFAULT


def t(key: str, **values: object) -> str:
    """The text of ``key`` in this thread's language, with ``values`` filled in."""
    text = catalogue(language()).get(key) or catalogue(DEFAULT)[key]
    return text.format(**values) if values else text


def num(value: float, spec: str = ".3f") -> str:
    """A number formatted with ``spec`` (``,`` groups thousands), with the language's separators."""
    decimal, thousands = SEPARATORS[language()]
    return "".join(decimal if c == "." else thousands if c == "," else c for c in format(value, spec))


KIND_KEYS = {
    "sink": "kind.sink",
    "diagonal": "kind.diagonal",
    "previous_token": "kind.previous_token",
    "mixed": "kind.mixed",
}


def kind_label(kind: object) -> str:
    """A head kind (metrics.md's label) in this language."""
    return t(KIND_KEYS[str(kind)])
