"""What one browser session is: its settings, its request and analysis, its language, how its widgets outlive a page."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st
from sinkscope.core.capture import Trace
from sinkscope.core.i18n import LANGUAGES, pick_language
from sinkscope.core.models import LoadedModel, resolve_device
from sinkscope.serving.settings import Settings

from views.text import set_language

ROOT = Path(__file__).resolve().parents[2]  # the repository: assets/ and docs/ ship beside the app
ASSETS = ROOT / "assets"
DOCS = ROOT / "docs"
EXAMPLES = {e["id"]: e for e in json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))}
LANGUAGE_EXAMPLES = {"en": "english", "fr": "french", "pt": "portuguese"}  # the prose a language opens on
KEEP = "session"  # persist_state of a widget whose value outlives a visit to another page (Streamlit keeps it)


def _secrets() -> dict[str, str]:
    try:
        return {key: str(value) for key, value in st.secrets.items() if not isinstance(value, dict)}
    except (FileNotFoundError, st.errors.StreamlitSecretNotFoundError):
        return {}


def settings() -> Settings:
    """Environment variables win over .streamlit/secrets.toml."""
    return Settings.from_env(_secrets() | dict(os.environ))


GPU_DTYPES = ["bfloat16", "float16", "float32"]


@dataclass(frozen=True)
class Request:
    """What the sidebar asks for: plain strings and ints, so results cache by value, and the model they name, loaded
    once by the sidebar (not part of the value: two requests for one model and text are equal)."""

    model: str
    dtype: str
    text: str
    add_bos: bool | None
    truncate: bool
    loaded: LoadedModel | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Analysis:
    request: Request
    trace: Trace


def owner() -> str:
    """This browser session, for per-session cache bounds."""
    return st.session_state.setdefault("owner", uuid.uuid4().hex)


def chosen_dtype() -> str:
    """The sidebar's GPU precision (every model on a CPU runs in float32)."""
    return st.session_state.get("dtype", GPU_DTYPES[0]) if resolve_device() == "cuda" else "auto"


def definitions_file(lang: str) -> Path:
    """docs/metrics.md, or its translation into ``lang`` (docs/metrics.fr.md, ...) where there is one."""
    translated = DOCS / f"metrics.{lang}.md"
    return translated if translated.exists() else DOCS / "metrics.md"


def choose_language() -> None:
    """This run's language: the picker's, else ?lang= in the URL, else the browser's, else English."""
    state = st.session_state
    if state.get("lang") not in LANGUAGES:
        state["lang"] = pick_language(st.query_params.get("lang"), st.context.locale)
    set_language(state["lang"])
