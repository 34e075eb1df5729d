"""Errors a user can cause and fix: the UI and the CLI show their message, never a traceback.

Messages are written in the raising thread's interface language (English on the command line).
"""

from backend.i18n import t


class SinkscopeError(Exception):
    """Base class: the message is written for the person who typed the input."""


class ModelLoadError(SinkscopeError):
    """The model could not be found, loaded, or analyzed."""


class InputError(SinkscopeError):
    """The text or file given cannot be analyzed as it is."""


class TokenLimitError(InputError):
    """The text is longer than the token limit; callers offer to truncate it."""

    def __init__(self, n_tokens: int, limit: int) -> None:
        super().__init__(t("error.token_limit", n=n_tokens, limit=limit))
        self.n_tokens = n_tokens
        self.limit = limit
