"""The Streamlit glue every page shares: cached model and results, the sidebar, session keys."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st

from backend.capture import LayerMaps, Trace, analyze, attention_maps, thumbnails
from backend.errors import SinkscopeError, TokenLimitError
from backend.metrics import HEAD_METRICS
from backend.models import BUNDLED, LoadedModel, load_model, resolve_device
from backend.tokens import adds_bos_by_default, encode, has_bos

ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLES = {e["id"]: e for e in json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))}
CUSTOM = "custom"
UI_TOKEN_LIMIT = int(os.environ.get("SINKSCOPE_MAX_TOKENS", "2048"))
PAST_SINK_HELP = "Hide the first key and renormalize each row over the rest, so the pattern under the sink shows."
URL_TEXT_LIMIT = 1500  # longer custom texts are not put in the URL
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


@st.cache_resource(show_spinner="Drawing every head of every layer…", max_entries=4)
def get_thumbnails(model: str, dtype: str, token_ids: tuple[int, ...]) -> np.ndarray:
    return thumbnails(get_model(model, dtype), token_ids, size=32)


def clamp(key: str, largest: int) -> None:
    """Keep a restored or remembered slider value inside this model's range."""
    if st.session_state.get(key, 0) > largest:
        st.session_state[key] = largest


def _model_picker() -> tuple[str, str]:
    labels = {key: spec.label + ("" if spec.installed() else " (not installed)") for key, spec in BUNDLED.items()}
    labels[CUSTOM] = "Other: hub id or local directory"
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
    restore_from_url()
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
            st.session_state.setdefault("add_bos", adds_bos_by_default(loaded.tokenizer))
            add_bos = st.toggle(f"Prepend the BOS token {loaded.tokenizer.bos_token}", key="add_bos", help=BOS_HELP)
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


def _flag(value: str) -> bool:
    if value not in ("0", "1"):
        raise ValueError(value)
    return value == "1"


def _metric(value: str) -> str:
    if value not in HEAD_METRICS:
        raise ValueError(value)
    return value


URL_FIELDS = {"layer": int, "head": int, "metric": _metric, "eps": float}
URL_FLAGS = ("add_bos", "log_scale", "past_sink")


def restore_from_url() -> None:
    """On a session's first run, put the view the URL describes into the widgets' state."""
    state, params = st.session_state, st.query_params
    if state.get("url_restored"):
        return
    state["url_restored"] = True
    model = params.get("model")
    if model in BUNDLED:
        state["model_choice"] = model
    elif model:
        state["model_choice"], state["model_path"] = CUSTOM, model
    if "text" in params:
        state["example"] = state["loaded_example"] = CUSTOM
        state["text"] = params["text"]
    elif params.get("example") in EXAMPLES:
        state["example"] = params["example"]
    parsers = URL_FIELDS | dict.fromkeys(URL_FLAGS, _flag)
    for key, parse in parsers.items():
        try:
            if key in params:
                state[key] = parse(params[key])
        except ValueError:
            pass  # a hand-edited URL with a bad value keeps the default instead


def sync_url() -> None:
    """Write the current view into the URL, so copying it shares exactly this view."""
    state = st.session_state
    custom_model = state.get("model_choice") == CUSTOM
    params = {"model": state.get("model_path") if custom_model else state.get("model_choice")}
    if state.get("example") != CUSTOM:
        params["example"] = state.get("example")
    elif len(state.get("text", "")) <= URL_TEXT_LIMIT:
        params["text"] = state.get("text")
    params |= {key: str(state[key]) for key in URL_FIELDS if key in state}
    params |= {key: str(int(state[key])) for key in URL_FLAGS if key in state}
    st.query_params.from_dict({k: v for k, v in params.items() if v not in (None, "")})
