"""The viewer's language for this run of the page, and the interface text in it.

The language is a context variable set at the start of every run (and of every fragment rerun), so
concurrent sessions in different languages never see each other's. The engine keeps no such state:
it returns message keys, and pages render them here.
"""

from __future__ import annotations

import contextvars
import html
import re

import pandas as pd
import plotly.graph_objects as go
from pandas.io.formats.style import Styler
from sinkscope.core.errors import SinkscopeError
from sinkscope.core.i18n import DEFAULT, LANGUAGES, SEPARATORS, Message, Text

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


def percent(value: float, spec: str = ".1f") -> str:
    """A percentage the way this run's language writes it: "79.3%", "79,3 %" (French), "79,3 %" (Portuguese)."""
    return Text(language()).percent(value, spec)


def times(ratio: float) -> str:
    """A ratio written from the larger side: "2.5x less", never "0.4x more"."""
    return Text(language()).times(ratio)


def kind_label(kind: object) -> str:
    return Text(language()).kind(kind)


def variant_label(variant: str) -> str:
    """A training-lab variant's display name in this run's language."""
    return Text(language()).variant(variant)


def metric_label(metric: str) -> str:
    """A metric's display name in this run's language (files and links keep the identifier)."""
    return Text(language()).metric(metric)


def say(what: Message | SinkscopeError) -> str:
    """An engine message or error, in this run's language."""
    return (what.message if isinstance(what, SinkscopeError) else what).text(language())


# what makes a link, emphasis, code or maths in the middle of a line
MARKDOWN_SIGNS = re.compile(r"([\\`*_\[\]<>#$~|])")


def plain(text: str) -> str:
    """A visitor's text shown literally inside Streamlit markdown: ``[x](javascript:...)`` is no link."""
    return MARKDOWN_SIGNS.sub(r"\\\1", text)


def coloured(text: str, colour: str) -> str:
    """Bold HTML in a CSS colour (the kind colours are hex), for ``st.markdown(..., unsafe_allow_html=True)``."""
    return f'<b style="color:{colour}">{html.escape(text)}</b>'


def local_figure(figure: go.Figure) -> go.Figure:
    """A Plotly figure whose tick labels and hover numbers use the language's separators (2,5 in French), with
    whole numbers on its ticks ("10 000", never the SI "10k")."""
    decimal, thousands = SEPARATORS[language()]
    whole = {"exponentformat": "none", "separatethousands": True}
    return figure.update_layout(separators=decimal + thousands).update_xaxes(**whole).update_yaxes(**whole)


def local_table(table: pd.DataFrame, precision: int = 4) -> pd.DataFrame | Styler:
    """A table whose numbers show the language's separators; the data (and sorting) stay numeric."""
    decimal, thousands = SEPARATORS[language()]
    if decimal == ".":
        return table
    return table.style.format(precision=precision, decimal=decimal, thousands=thousands)
