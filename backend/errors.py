"""Errors a user can cause and fix: the UI and the CLI show their message, never a traceback."""


class SinkscopeError(Exception):
    """Base class: the message is written for the person who typed the input."""


class ModelLoadError(SinkscopeError):
    """The model could not be found, loaded, or analyzed."""


class InputError(SinkscopeError):
    """The text or file given cannot be analyzed as it is."""


class TokenLimitError(InputError):
    """The text is longer than the token limit; callers offer to truncate it."""

    def __init__(self, n_tokens: int, limit: int) -> None:
        super().__init__(f"The text has {n_tokens} tokens; the limit is {limit}.")
        self.n_tokens = n_tokens
        self.limit = limit
