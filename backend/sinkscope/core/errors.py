"""Errors a user can cause and fix: the UI and the CLI show their message, never a traceback.

Each carries a catalogue key and its values: ``str(err)`` is the English text (the command line,
a notebook), and the app renders ``err.message`` in the viewer's language.
"""

from __future__ import annotations

from sinkscope.core.i18n import Message

REASON_CHARS = 300
SHOWN_CHARS = 120


def shortened(text: str, chars: int = SHOWN_CHARS) -> str:
    """A value as a message shows it: a 5,000-character one cut to a readable length."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def reason_of(err: BaseException) -> str:
    """An exception's message as one line of readable length (some span several lines, one ends in a list)."""
    parts = err.args if len(err.args) > 1 and all(isinstance(part, str) for part in err.args) else (str(err),)
    return shortened(" ".join(" ".join(parts).split()) or type(err).__name__, REASON_CHARS)  # not a tuple's repr


class SinkscopeError(Exception):
    """Base class: the message is written for the person who typed the input."""

    def __init__(self, key: str, **params: object) -> None:
        self.message = Message.of(key, **params)
        super().__init__(self.message.text())


class ModelLoadError(SinkscopeError):
    """The model could not be found, loaded, or analyzed."""


class InputError(SinkscopeError):
    """The text or file given cannot be analyzed as it is."""


class TokenLimitError(InputError):
    """The text is longer than the token limit; callers offer to truncate it."""

    def __init__(self, n_tokens: int | None, limit: int) -> None:
        """``n_tokens`` is None when the text was too long to count in full."""
        if n_tokens is None:
            super().__init__("error.token_limit_over", limit=limit)
        else:
            super().__init__("error.token_limit", n=n_tokens, limit=limit)
        self.n_tokens = n_tokens
        self.limit = limit


class ExportError(SinkscopeError):
    """A figure could not be written as an image (no Chromium for Plotly's static export, or it failed)."""
