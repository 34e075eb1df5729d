"""Interface text in English, French and Portuguese, from one catalogue per language.

Stateless: the caller names the language. ``Text("fr")("fig.layer")`` looks a stable key up (falling
back to English) and fills in its values; ``Text("fr").num(0.5)`` writes a number the way the
language does (a decimal comma in French and Portuguese). Numbers, percentages and plurals follow CLDR
(Babel): a count in a sentence picks its word with ``{n:one=head|other=heads}``, a decimal its places with
``{x:.2f}``. The engine itself never picks a language: it returns data and ``Message`` keys, and whoever shows
them renders them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from babel import Locale
from babel.numbers import NumberPattern, format_percent, get_decimal_symbol, get_group_symbol, parse_pattern

LOCALES = Path(__file__).resolve().parent.parent / "locales"
LANGUAGES = {"en": "English", "fr": "Français", "pt": "Português"}
DEFAULT = "en"
SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
NOT_MEASURED = "—"  # what a number that could not be measured (NaN) reads as
MINUS = "\u2212"  # a number's minus sign, as typesetting writes it (not the hyphen)


def state(layer: int) -> str:
    """The residual state h^layer as notation writes it: h¹²."""
    return "h" + str(layer).translate(SUPERSCRIPTS)


def states(runs: Iterable[tuple[int, int]]) -> str:
    """Runs of residual states, "h³–h⁹, h¹²–h²⁸", or a dash where there is none (never empty parentheses)."""
    return ", ".join(f"{state(first)}–{state(last)}" for first, last in runs) or "—"


SEPARATORS = {code: (get_decimal_symbol(code), get_group_symbol(code)) for code in LANGUAGES}  # (decimal, thousands)
KIND_KEYS = {
    "sink": "kind.sink",
    "diagonal": "kind.diagonal",
    "previous_token": "kind.previous_token",
    "mixed": "kind.mixed",
    "none": "kind.none",
}  # catalogue keys of sinkscope.core.names.Kind, and of a hybrid's layer without attention (names.NO_ATTENTION)
METRIC_KEYS = {
    "sink": "name.sink", "diagonal": "name.diagonal", "previous_token": "name.previous_token",
    "entropy": "name.entropy", "value_sink": "name.value_sink", "learned_sink": "name.learned_sink",
    "value_norm_ratio": "name.value_norm_ratio", "withheld": "name.withheld", "output_norm": "name.output_norm",
    "top1": "name.top1", "top2": "name.top2", "top3": "name.top3", "median_abs": "name.median_abs",
    "massive": "name.massive", "first_norm_ratio": "name.first_norm_ratio", "token_cosine": "name.token_cosine",
    "token_cosine_scaled": "name.token_cosine_scaled", "bos_cosine": "name.bos_cosine",
    "bos_cosine_raw": "name.bos_cosine_raw", "key_sink": "name.key_sink", "kind": "name.kind",
}  # fmt: skip  # the display name of each metric of sinkscope.core.names (and key_sink), where a reader sees it
VARIANT_KEYS = {
    "softmax": "variant.softmax", "softmax+1": "variant.softmax_plus_one", "sigmoid": "variant.sigmoid",
    "relu": "variant.relu", "linear": "variant.linear", "sink-logit": "variant.sink_logit", "gated": "variant.gated",
}  # fmt: skip  # the training lab's attention variants (names.TASK_VARIANTS, POLARIZE_VARIANTS) as a reader sees them


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


@cache
def _decimal_format(pattern: str, code: str) -> tuple[NumberPattern, Locale]:
    return parse_pattern(pattern), Locale.parse(code)


def decimal(value: float, pattern: str, code: str) -> str:
    """Babel's ``format_decimal``, its pattern and locale parsed once: a head map writes thousands of numbers."""
    number_format, locale = _decimal_format(pattern, code)
    return number_format.apply(value, locale)


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

    @property
    def code(self) -> str:
        return self.lang if self.lang in LANGUAGES else DEFAULT

    def _shown(self, value: object) -> object:
        """A number in the language's way (a count that can also pick its plural word), a nested Message in this
        language, anything else as it is."""
        if isinstance(value, bool):
            return value
        if isinstance(value, float):
            return Number(value, self)
        if isinstance(value, int):
            return Count(value, self)
        return value.text(self.lang) if isinstance(value, Message) else value

    def num(self, value: float, spec: str = ".3f") -> str:
        """``value`` as Python's ``spec`` would round it ("+.2f", ".1f", "g", ".1e"), written by CLDR's rules for
        the language: its decimal sign and one thousands separator for every number."""
        if math.isnan(value):
            return NOT_MEASURED  # a number that could not be measured: a dash, never "nan"
        tiny = spec.endswith("g") and value != 0 and not 1e-4 <= abs(value) < 1e16  # Python's "g" writes 3e-07
        if not math.isfinite(value) or spec.endswith("e") or tiny:
            return self._local_symbols(format(value, spec.replace(",", "")))
        if spec.endswith("g"):
            value, pattern = float(f"{value:.6g}"), "#,##0.######"  # Python's six significant digits, no zeros
        else:
            places = int(spec.rstrip("f").split(".")[-1] or 0)
            value, pattern = round(value, places), "#,##0" + ("." + "0" * places if places else "")
        value = 0.0 if value == 0 else value  # a value that rounds to zero has no sign: "-0.00" reads as a bug
        written = decimal(value, pattern, self.code).replace("-", MINUS)
        return ("+" + written) if spec.startswith("+") and value >= 0 else written

    def _local_symbols(self, written: str) -> str:
        decimal, thousands = SEPARATORS[self.code]
        return "".join(decimal if c == "." else thousands if c == "," else c for c in written)

    def percent(self, value: float, spec: str = ".1f") -> str:
        """``value`` (already in percent) as the language writes a percentage (CLDR: "70.4%", "70,4 %")."""
        if not math.isfinite(value):
            return NOT_MEASURED if math.isnan(value) else self._local_symbols(format(value, "f")) + "%"
        places = int(spec.rstrip("f").split(".")[-1] or 0)
        pattern = Locale.parse(self.code).percent_formats[None].pattern
        return format_percent(round(value, places) / 100, _decimals(pattern, places), locale=self.code)

    def plural(self, count: int, forms: dict[str, str]) -> str:
        """The word of ``forms`` (CLDR plural categories: one, many, other ...) that goes with ``count``."""
        return forms.get(Locale.parse(self.code).plural_form(abs(count)), forms["other"])

    def times(self, ratio: float) -> str:
        """``ratio`` as "2.5x more" or "2.5x less" in this language (``times``)."""
        return times(ratio).text(self.lang)

    def metric(self, name: str) -> str:
        """A metric's display name in this language (the identifier stays in files: CSV columns, the library)."""
        return self(METRIC_KEYS[name]) if name in METRIC_KEYS else name

    def variant(self, name: str) -> str:
        """A training-lab attention variant's display name in this language (files keep the identifier)."""
        return self(VARIANT_KEYS[name]) if name in VARIANT_KEYS else name

    def kind(self, kind: object) -> str:
        """A head kind (metrics.md's label) in this language."""
        return self(KIND_KEYS[str(kind)])


def _decimals(pattern: str, places: int) -> str:
    """A CLDR number pattern ("#,##0 %") with ``places`` digits after the decimal sign."""
    integer_end = pattern.rindex("0") + 1
    return pattern[:integer_end] + ("." + "0" * places if places else "") + pattern[integer_end:]


@dataclass(frozen=True)
class Number:
    """A decimal in a sentence: ``{x}`` writes it with Python's "g" rounding, ``{x:.2f}`` with two decimals, both in
    the language's way."""

    value: float
    text: Text

    def __format__(self, spec: str) -> str:
        return self.text.num(self.value, spec or "g")


@dataclass(frozen=True)
class Count:
    """An integer in a sentence: ``{n}`` writes it in the language's way; ``{n:one=head|other=heads}`` writes the
    word of its CLDR plural category instead (so a catalogue says "1 head", "2 heads", "1 cabeça")."""

    value: int
    text: Text

    def __format__(self, spec: str) -> str:
        if not spec:
            return decimal(self.value, "#,##0", self.text.code)
        if spec == "sup":  # h{layer:sup}: the residual state h¹², an exponent as notation writes it
            return str(self.value).translate(SUPERSCRIPTS)
        forms = dict(form.split("=", 1) for form in spec.split("|"))
        return self.text.plural(self.value, forms)
