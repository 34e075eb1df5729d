"""Text -> token ids, and ids -> strings a person can read in an axis label."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from sinkscope.core.errors import InputError, TokenLimitError

WHITESPACE_MARKERS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
INVISIBLE = {
    0x061C,
    0x200B,
    0x200C,
    0x200D,
    0x200E,
    0x200F,
    0x2028,
    0x2029,
    0xFEFF,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
}  # bidirectional controls, zero widths, separators
COUNTED_CHARS = 100_000  # texts up to this long get an exact token count (about 40 ms of tokenizing)
_LONGEST: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def longest_token(tokenizer: Any) -> int:
    """An upper bound on the characters of text one token covers: its longest vocabulary string (a byte-level
    or byte-fallback entry is at least as long as the text it stands for)."""
    if tokenizer not in _LONGEST:
        _LONGEST[tokenizer] = max(map(len, tokenizer.get_vocab()))
    return _LONGEST[tokenizer]


def encode(
    tokenizer: Any,
    text: str,
    limit: int,
    truncate: bool = False,
    add_bos: bool | None = None,
) -> list[int]:
    """Token ids of ``text``; ``add_bos`` None follows the tokenizer's own default.

    Over ``limit`` tokens this raises TokenLimitError unless ``truncate`` keeps the first ``limit``. Only the
    characters that can hold ``limit`` + 2 tokens (at least ``COUNTED_CHARS``) are tokenized: a 10 MB paste
    costs what a long text does.
    """
    if not text or not text.strip():
        raise InputError("error.empty_text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate: no tokenizer can read it
        raise InputError("error.bad_character", position=err.start, code=f"U+{ord(text[err.start]):04X}") from None
    counted = _beginning(tokenizer, text, limit)
    ids = list(tokenizer(counted, add_special_tokens=False)["input_ids"])
    if add_bos is None:
        add_bos = adds_bos_by_default(tokenizer)
    if add_bos and has_bos(tokenizer):
        ids = [tokenizer.bos_token_id, *ids]
    if len(ids) > limit:
        if not truncate:
            raise TokenLimitError(len(ids) if counted == text else None, limit)
        ids = ids[:limit]
    return ids


def _beginning(tokenizer: Any, text: str, tokens: int) -> str:
    """The characters of ``text`` that hold its first ``tokens`` + 1 tokens (at least ``COUNTED_CHARS``)."""
    return text[: max((tokens + 2) * longest_token(tokenizer), COUNTED_CHARS)]


def analyzed_part(tokenizer: Any, text: str, ids: Sequence[int]) -> str:
    """The part of ``text`` an analysis of ``ids`` (``encode``'s) read: all of it, or the beginning a truncation
    kept, cut where its last token ends."""
    body = len(ids) - int(bool(ids) and has_bos(tokenizer) and ids[0] == tokenizer.bos_token_id)
    counted = _beginning(tokenizer, text, body)
    ends = [
        end for _, end in tokenizer(counted, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    ]
    if counted == text and body >= len(ends):
        return text
    return text[: ends[body - 1]] if body else ""


def cut_windows(tokenizer: Any, text: str, length: int, count: int) -> list[tuple[int, list[int]]]:
    """Up to ``count`` consecutive windows of exactly ``length`` tokens: (start, ids), ``start`` counted in the
    text's own tokens. Each window begins with the BOS token where the tokenizer adds one by default, as a
    direct analysis of that window would."""
    lead = [tokenizer.bos_token_id] if adds_bos_by_default(tokenizer) else []
    body_length = length - len(lead)
    needed = body_length * count
    body = list(tokenizer(_beginning(tokenizer, text, needed), add_special_tokens=False)["input_ids"])[:needed]
    starts = range(0, len(body) - body_length + 1, body_length)
    return [(start, lead + body[start : start + body_length]) for start in starts]


def decode_text(data: bytes, name: str, max_bytes: int) -> str:
    """The text in an uploaded or read file, or an InputError saying what is wrong with it."""
    if len(data) > max_bytes:
        raise InputError("error.file_too_large", name=name, kb=len(data) // 1024, limit=max_bytes // 1024)
    if b"\x00" in data:
        raise InputError("error.binary_file", name=name)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError("error.not_utf8", name=name, byte=err.start) from err
    if not text.strip():
        raise InputError("error.empty_file", name=name)
    return text


def has_bos(tokenizer: Any) -> bool:
    """Whether a BOS token exists to prepend."""
    return tokenizer is not None and tokenizer.bos_token_id is not None


def adds_bos_by_default(tokenizer: Any) -> bool:
    """Whether the tokenizer itself starts every text with its BOS token (Gemma does, SmolLM2 does not)."""
    return has_bos(tokenizer) and tokenizer("a")["input_ids"][:1] == [tokenizer.bos_token_id]


def visible(text: str, keep: str = "\n\t") -> str:
    """``text`` safe to draw and to write into SVG, XML or HTML: a control character (U+0001) becomes its control
    picture (␁), a bidirectional override or an invisible character its code in brackets ([U+202E]), so nothing
    breaks a file or reverses a caption; the characters in ``keep`` stay."""

    def shown(ch: str) -> str:
        code = ord(ch)
        if ch in keep:
            return ch
        if code < 0x20:
            return chr(0x2400 + code)
        if code == 0x7F:
            return "␡"
        return f"[U+{code:04X}]" if 0x80 <= code < 0xA0 or code in INVISIBLE else ch

    return "".join(shown(ch) for ch in text)


def display_token(tokenizer: Any, token_id: int) -> str:
    """One token as text, whitespace shown as visible markers; raw bytes when not valid UTF-8 alone."""
    text = tokenizer.decode([token_id]) if tokenizer is not None else str(token_id)
    if "\ufffd" in text or text == "":
        text = tokenizer.convert_ids_to_tokens(token_id)
    return visible("".join(WHITESPACE_MARKERS.get(ch, ch) for ch in text), keep="")


def display_tokens(tokenizer: Any, ids: list[int]) -> tuple[str, ...]:
    """Display strings for every id, in order."""
    return tuple(display_token(tokenizer, i) for i in ids)


def token_labels(tokens: tuple[str, ...] | list[str]) -> list[str]:
    """Axis labels that stay distinct when a token repeats: ``"{position}:{token}"``."""
    return [f"{i}:{tok}" for i, tok in enumerate(tokens)]
