"""Errors a user can cause and fix: the UI and the CLI show their message, never a traceback.

Each carries a catalogue key and its values: ``str(err)`` is the English text (the command line,
a notebook), and the app renders ``err.message`` in the viewer's language.
"""

from __future__ import annotations

from sinkscope.core.i18n import Message


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
