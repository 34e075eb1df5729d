"""Texts that ship with every Python: what a measurement that needs a long text, the same for every visitor, runs on."""

from __future__ import annotations


def builtin_text() -> str:
    """A long English text that ships with every Python: the pydoc topic help."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))
