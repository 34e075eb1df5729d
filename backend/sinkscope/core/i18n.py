"""Interface text in English, French and Portuguese, from one catalogue per language.

Stateless: the caller names the language. ``Text("fr")("fig.layer")`` looks a stable key up (falling
back to English) and fills in its values; ``Text("fr").num(0.5)`` writes a number the way the
language does (a decimal comma in French and Portuguese). The engine itself never picks a language:
it returns data and ``Message`` keys, and whoever shows them renders them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

LOCALES = Path(__file__).resolve().parent.parent / "locales"
LANGUAGES = {"en": "English", "fr": "Français", "pt": "Português"}
DEFAULT = "en"
SEPARATORS = {"en": (".", ","), "fr": (",", "\u202f"), "pt": (",", ".")}  # (decimal, thousands)
PERCENT_SPACE = {"en": "", "fr": "\u202f", "pt": "\u00a0"}  # before "%": no break, so "%" never starts a line
KIND_KEYS = {
    "sink": "kind.sink",
    "diagonal": "kind.diagonal",
    "previous_token": "kind.previous_token",
    "mixed": "kind.mixed",
}  # catalogue keys of sinkscope.core.names.Kind


@cache
def catalogue(code: str) -> dict[str, str]:
    """The messages of one language, key -> text with ``{name}`` placeholders."""
    return json.loads((LOCALES / f"{code}.json").read_text(encoding="utf-8"))


def times(ratio: float) -> Message:
    """How ``ratio`` compares to 1, written so that the number is at least 1: 0.4 is "2.5x less", never "0.4x more"."""
    if ratio != ratio or ratio <= 0:  # NaN or nothing to compare
        return Message.of("num.times_none")
    shown = max(ratio, 1 / ratio)
    if round(shown, 1) == 1.0:
        return Message.of("num.times_same")
    return Message.of("num.times_more" if ratio > 1 else "num.times_less", times=round(shown, 1))


def pick_language(*candidates: str | None) -> str:
    """The first candidate that names a supported language ('fr', 'pt-BR', 'fr-CA' ...), else English."""
    for candidate in candidates:
        code = (candidate or "").strip().lower()[:2]
        if code in LANGUAGES:
            return code
    return DEFAULT


@dataclass(frozen=True)
class Message:
    """Text the engine wants shown: a catalogue key and its values, rendered by whoever shows it."""

    key: str
    params: tuple[tuple[str, object], ...] = field(default=())

    @staticmethod
    def of(key: str, **params: object) -> Message:
        return Message(key, tuple(params.items()))

    def text(self, lang: str = DEFAULT) -> str:
        return Text(lang)(self.key, **dict(self.params))


@dataclass(frozen=True)
class Text:
    """The catalogue of one language as a function: ``tr(key, **values)``; floats get local separators."""

    lang: str = DEFAULT

    def __call__(self, key: str, **values: object) -> str:
        code = self.lang if self.lang in LANGUAGES else DEFAULT
        text = catalogue(code).get(key) or catalogue(DEFAULT)[key]
        if not values:
            return text
        return text.format(**{name: self._shown(value) for name, value in values.items()})

    def _shown(self, value: object) -> object:
        """A float with the language's separators, a nested Message in this language, anything else as it is."""
        if isinstance(value, float):
            return self.num(value, "g")
        return value.text(self.lang) if isinstance(value, Message) else value

    def num(self, value: float, spec: str = ".3f") -> str:
        """A number formatted with ``spec`` (``,`` groups thousands), with the language's separators."""
        decimal, thousands = SEPARATORS.get(self.lang, SEPARATORS[DEFAULT])
        written = format(value, spec)
        if written.startswith("-") and not written.strip("-0.,e+%"):
            written = written[1:]  # a value that rounds to zero has no sign: "-0.00" reads as a bug
        return "".join(decimal if c == "." else thousands if c == "," else c for c in written)

    def percent(self, value: float, spec: str = ".1f") -> str:
        """``value`` (already in percent) with the language's separators and its space before "%"."""
        return self.num(value, spec) + PERCENT_SPACE.get(self.lang, "") + "%"

    def times(self, ratio: float) -> str:
        """``ratio`` as "2.5x more" or "2.5x less" in this language (``times``)."""
        return times(ratio).text(self.lang)

    def kind(self, kind: object) -> str:
        """A head kind (metrics.md's label) in this language."""
        return self(KIND_KEYS[str(kind)])
