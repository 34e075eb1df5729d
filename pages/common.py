"""The Streamlit glue every page shares: cached model and results, the sidebar, session keys."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from backend.capture import LayerMaps, Trace, analyze, attention_maps
from backend.errors import SinkscopeError, TokenLimitError
from backend.models import BUNDLED, LoadedModel, load_model, resolve_device
from backend.tokens import adds_bos_by_default, encode, has_bos

ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLES = {e["id"]: e for e in json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))}
CUSTOM = "custom"
UI_TOKEN_LIMIT = int(os.environ.get("SINKSCOPE_MAX_TOKENS", "2048"))
BOS_HELP = "The sink forms on whatever token comes first: turn this off to see it move to the first word."


@dataclass(frozen=True)
class Request:
    """What the sidebar asks for: plain strings and ints, so results cache by value."""

    model: str
    dtype: str
    text: str
    add_bos: bool | None
    truncate: bool


@st.cache_resource(show_spinner="Loading the model (the first start dequantizes it: about 20 s)…", max_entries=2)
def get_model(spec: str, dtype: str) -> LoadedModel:
    return load_model(spec, dtype=dtype)


def token_limit(loaded: LoadedModel) -> int:
    return min(UI_TOKEN_LIMIT, loaded.info.max_tokens)


@st.cache_resource(show_spinner="Running the model on your text…", max_entries=16)
def get_trace(request: Request) -> Trace:
    loaded = get_model(request.model, request.dtype)
    limit = token_limit(loaded)
    return analyze(loaded, request.text, max_tokens=limit, truncate=request.truncate, add_bos=request.add_bos)


@st.cache_resource(show_spinner="Recomputing this layer's attention maps…", max_entries=8)
def get_layer_maps(model: str, dtype: str, token_ids: tuple[int, ...], layer: int) -> LayerMaps:
    return attention_maps(get_model(model, dtype), token_ids, layer)


def _model_picker() -> tuple[str, str]:
    labels = {key: spec.label for key, spec in BUNDLED.items()} | {CUSTOM: "Other: hub id or local directory"}
    choice = st.selectbox("Model", list(labels), format_func=labels.get, key="model_choice")
    spec = st.text_input("Hub id or directory", key="model_path") if choice == CUSTOM else choice
    dtype = "auto"
    if resolve_device() == "cuda":
        dtype = st.selectbox("Weights on the GPU", ["bfloat16", "float16", "float32"], key="dtype")
    return (spec or "").strip(), dtype


def _text_input() -> str:
    ids = [*EXAMPLES, CUSTOM]
    titles = {k: e["title"] for k, e in EXAMPLES.items()} | {CUSTOM: "Your own text"}
    example = st.selectbox("Example", ids, format_func=titles.get, key="example")
    if example != CUSTOM:
        st.caption(EXAMPLES[example]["teaches"])
        if st.session_state.get("loaded_example") != example:
            st.session_state["text"] = EXAMPLES[example]["text"]  # an example fills the box; edits are kept
            st.session_state["loaded_example"] = example
    return st.text_area("Text", key="text", height=180)


def sidebar() -> Request | None:
    """Draw the shared controls; return the request, or None with a message when there is none yet."""
    with st.sidebar:
        spec, dtype = _model_picker()
        if not spec:
            st.info("Type a hub id or a local model directory.")
            return None
        try:
            loaded = get_model(spec, dtype)
        except SinkscopeError as err:
            st.error(str(err))
            return None
        st.caption(loaded.info.badge())
        text = _text_input()
        add_bos = None
        if has_bos(loaded.tokenizer):
            label = f"Prepend the BOS token {loaded.tokenizer.bos_token}"
            add_bos = st.toggle(label, value=adds_bos_by_default(loaded.tokenizer), key="add_bos", help=BOS_HELP)
        _token_count_caption(loaded, text, add_bos)
        return Request(spec, dtype, text, add_bos, truncate=st.session_state.get("truncate_text") == text)


def _token_count_caption(loaded: LoadedModel, text: str, add_bos: bool | None) -> None:
    try:
        n_tokens = len(encode(loaded.tokenizer, text, limit=10**9, add_bos=add_bos))
    except SinkscopeError:
        n_tokens = 0
    st.caption(f"{n_tokens} tokens · limit {token_limit(loaded)}")


def _token_limit_notice(request: Request, err: TokenLimitError) -> None:
    st.warning(f"{err} Shorten the text, or analyze only its first {err.limit} tokens.")
    if st.button(f"Truncate to {err.limit} tokens", key="truncate_button"):
        st.session_state["truncate_text"] = request.text  # only this text: a new one is checked again
        st.rerun()


def current_trace(request: Request | None) -> Trace | None:
    """The analysis of the sidebar's text, or None after showing why there is none."""
    if request is None:
        return None
    try:
        return get_trace(request)
    except TokenLimitError as err:
        _token_limit_notice(request, err)
    except SinkscopeError as err:
        st.error(str(err))
    return None
