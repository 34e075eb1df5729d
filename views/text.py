"""The viewer's language for this run of the page, and the interface text in it.

The language is a context variable set at the start of every run (and of every fragment rerun), so
concurrent sessions in different languages never see each other's. The engine keeps no such state:
it returns message keys, and pages render them here.
"""

from __future__ import annotations

import contextvars

from sinkscope.core.errors import SinkscopeError
from sinkscope.core.i18n import DEFAULT, LANGUAGES, Message, Text

_language: contextvars.ContextVar[str] = contextvars.ContextVar("sinkscope_language", default=DEFAULT)


def set_language(code: str) -> None:
    """Use ``code`` for the rest of this thread's run (unknown codes fall back to English)."""
    _language.set(code if code in LANGUAGES else DEFAULT)


def language() -> str:
    return _language.get()


def t(key: str, **values: object) -> str:
    """The text of ``key`` in this run's language, with ``values`` filled in."""
    return Text(language())(key, **values)


def num(value: float, spec: str = ".3f") -> str:
    """A number written the way this run's language writes it."""
    return Text(language()).num(value, spec)


def kind_label(kind: object) -> str:
    return Text(language()).kind(kind)


def say(what: Message | SinkscopeError) -> str:
    """An engine message or error, in this run's language."""
    return (what.message if isinstance(what, SinkscopeError) else what).text(language())


def coloured(text: str, colour: str) -> str:
    """Bold Markdown in one of Streamlit's named colours (red, blue, green, gray...)."""
    return f":{colour}[**{text}**]"
