"""The Streamlit glue every page shares: settings, the model, bounded result caches, the sidebar."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from pandas.io.formats.style import Styler
from sinkscope.core.arrays import pool_max
from sinkscope.core.bundled import BUNDLED
from sinkscope.core.capture import LayerMaps, Trace, analyze, attention_maps, thumbnails
from sinkscope.core.errors import InputError, SinkscopeError, TokenLimitError
from sinkscope.core.i18n import LANGUAGES, SEPARATORS, pick_language
from sinkscope.core.models import LoadedModel, load_model, resolve_device
from sinkscope.core.tokens import adds_bos_by_default, decode_text, encode, has_bos
from sinkscope.serving.runs import BoundedCache, RunQueue
from sinkscope.serving.settings import Settings

from views.text import coloured, kind_label, language, say, set_language, t
from views.url_state import CUSTOM, URL_TEXT_LIMIT, restore_from_url, show_ignored

ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLES = {e["id"]: e for e in json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))}
CARRIED = (
    "lang", "model_choice", "model_path", "dtype", "example", "text", "add_bos", "layer", "head",
    "metric", "eps", "log_scale", "past_sink", "value_units", "tab_id",
    *(side + key for side in ("a_", "b_") for key in ("model_choice", "model_path", "example", "text", "add_bos")),
    "compare_preset", "compare_metric", "compare_eps", "census_source", "census_folder", "census_eps",
)  # fmt: skip  # widgets of other pages and of the explorer's closed tabs keep their values


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
    """What the sidebar asks for: plain strings and ints, so results cache by value."""

    model: str
    dtype: str
    text: str
    add_bos: bool | None
    truncate: bool


@dataclass(frozen=True)
class Analysis:
    request: Request
    trace: Trace


@dataclass
class Shared:
    """Process-wide state: one run queue per model (and one for the lab) and one result cache bounded by
    bytes, shared by every session: analyses, recomputed maps, lesson runs and lab runs alike."""

    settings: Settings
    results: BoundedCache
    queues: dict[str, RunQueue] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def queue(self, name: str) -> RunQueue:
        with self.lock:
            return self.queues.setdefault(name, RunQueue())


@st.cache_resource
def shared() -> Shared:
    config = settings()
    return Shared(config, BoundedCache(config.cache_bytes, config.session_cache_bytes))


@st.cache_resource(show_spinner=False, max_entries=2)
def _cached_model(spec: str, dtype: str) -> LoadedModel:
    return load_model(spec, dtype=dtype)


def get_model(spec: str, dtype: str) -> LoadedModel:
    with st.spinner(t("side.loading_model")):
        return _cached_model(spec, dtype)


def owner() -> str:
    """This browser session, for per-session cache bounds."""
    return st.session_state.setdefault("owner", uuid.uuid4().hex)


def run_once(queue: str, key: tuple[Hashable, ...], run: Callable[[], Any], message: str) -> Any:
    """The result cached under ``key`` for every session, or ``run()`` in ``queue``'s turn (a model, or
    the lab); shows the queue position while waiting."""
    cache, key = shared().results, (queue, *key)
    found = cache.get(key)
    if found is not None:
        return found
    notice = st.empty()

    def waiting(ahead: int) -> None:
        notice.info(t("common.waiting_one") if ahead == 1 else t("common.waiting_many", n=ahead))

    with st.spinner(message):
        result = cache.get_or_run(key, owner(), run, shared().queue(queue), on_wait=waiting)
    notice.empty()
    return result


def token_limit(loaded: LoadedModel) -> int:
    return min(shared().settings.max_tokens, loaded.info.max_tokens)


def _trace_job(loaded: LoadedModel, request: Request) -> tuple[tuple[Hashable, ...], Callable[[], Trace]]:
    """The cache key of a request's trace (everything the result depends on) and the run that makes it."""
    limit = token_limit(loaded)
    key = ("trace", request.dtype, request.text, request.add_bos, request.truncate, limit)

    def run() -> Trace:
        return analyze(loaded, request.text, max_tokens=limit, truncate=request.truncate, add_bos=request.add_bos)

    return key, run


def get_trace(request: Request) -> Trace:
    key, run = _trace_job(get_model(request.model, request.dtype), request)
    return run_once(request.model, key, run, t("common.running_model"))


def warm_examples() -> None:
    """Load the default model and analyze every example text into the shared cache, as the sidebar would ask
    for them: run once when the server starts, so a class's first visits find their heatmaps ready."""
    config = settings()
    spec = next(key for key in BUNDLED if config.allows(key))  # the sidebar's first choice
    if not BUNDLED[spec].installed():
        return
    dtype = GPU_DTYPES[0] if resolve_device() == "cuda" else "auto"
    loaded = _cached_model(spec, dtype)
    add_bos = adds_bos_by_default(loaded.tokenizer) if has_bos(loaded.tokenizer) else None
    for example in EXAMPLES.values():
        key, run = _trace_job(loaded, Request(spec, dtype, example["text"], add_bos, truncate=False))
        shared().results.get_or_run((spec, *key), "warm-up", run, shared().queue(spec))


def get_layer_maps(request: Request, trace: Trace, layer: int) -> LayerMaps:
    """One layer's maps of the trace's text: that layer alone runs, from the trace's h^layer."""
    loaded, ids = get_model(request.model, request.dtype), trace.token_ids
    run = lambda: attention_maps(loaded, ids, layer, start=trace.residual[layer])  # noqa: E731
    return run_once(request.model, ("maps", request.dtype, ids, layer), run, t("common.recomputing_layer"))


def get_layer_strip(request: Request, trace: Trace, layer: int) -> np.ndarray:
    """Every head of one layer max-pooled to 64 x 64, (1, head, rows, cols): computed once per layer, not per scrub."""
    maps = get_layer_maps(request, trace, layer)
    run = lambda: np.stack([pool_max(m, 64)[0] for m in maps.weights])[None]  # noqa: E731
    key = ("strip", request.dtype, trace.token_ids, layer)
    return run_once(request.model, key, run, t("common.recomputing_layer"))


def get_thumbnails(request: Request, token_ids: tuple[int, ...]) -> np.ndarray:
    loaded = get_model(request.model, request.dtype)
    run = lambda: thumbnails(loaded, token_ids, size=32)  # noqa: E731
    return run_once(request.model, ("thumbnails", request.dtype, token_ids), run, t("common.drawing_heads"))


def step_choices(choices: list[int]) -> list[int]:
    """The training lengths this deployment allows (hosted mode caps them)."""
    allowed = [steps for steps in choices if steps <= shared().settings.max_lab_steps]
    return allowed or choices[:1]


def clamp(key: str, largest: int) -> None:
    """Keep a restored or remembered slider value inside this model's range."""
    st.session_state[key] = min(max(st.session_state.get(key, 0), 0), largest)


def local_table(table: pd.DataFrame, precision: int = 4) -> pd.DataFrame | Styler:
    """A table whose numbers show the language's separators; the data (and sorting) stay numeric."""
    decimal, thousands = SEPARATORS[language()]
    if decimal == ".":
        return table
    return table.style.format(precision=precision, decimal=decimal, thousands=thousands)


def reads_little(trace: Trace) -> np.ndarray:
    """(layer, head) scores whose largest is the clearest "attends to the first token but reads little from it"
    head (sink > 0.5, largest sink - value_sink); without one, the strongest sink."""
    sink, value_sink = trace.heads["sink"], trace.heads["value_sink"]
    return np.where(sink > 0.5, sink - value_sink, sink - 1)


def pick_head(trace: Trace) -> tuple[int, int]:
    """Layer and head sliders that stay inside this model's range.

    They start on the head that teaches the lesson (``reads_little``): a pure sink head would show the same
    map twice, attention and what it reads, and tell a student that it reads everything from the sink.
    """
    n_layers, n_heads = trace.shape
    score = reads_little(trace)
    strongest = np.unravel_index(np.nan_to_num(score, nan=-np.inf).argmax(), trace.shape)
    st.session_state.setdefault("layer", int(strongest[0]))
    st.session_state.setdefault("head", int(strongest[1]))
    clamp("layer", n_layers - 1)
    clamp("head", n_heads - 1)
    pick = st.columns(2)
    layer = pick[0].slider(t("common.layer"), 0, n_layers - 1, key="layer")
    return layer, pick[1].slider(t("common.head"), 0, n_heads - 1, key="head")


KIND_COLOURS = {"sink": "red", "diagonal": "blue", "previous_token": "green", "mixed": "gray"}  # as in the charts


def kind_cell(container: Any, kind: str) -> None:
    """A head's kind under its label, in the kind's chart colour (a metric's large type cuts long names off)."""
    container.caption(t("explorer.kind"))
    container.markdown(coloured(kind_label(kind), KIND_COLOURS[kind]))


def model_choices(config: Settings) -> dict[str, str]:
    """Selectbox options: the allowed bundled models, plus a free field outside hosted mode."""
    labels = {
        key: spec.label + ("" if spec.installed() else t("side.not_installed"))
        for key, spec in BUNDLED.items()
        if config.allows(key)
    }
    if not config.hosted:
        labels[CUSTOM] = t("side.other_model")
    return labels


def _model_picker(prefix: str = "") -> str:
    config = shared().settings
    labels = model_choices(config)
    choice = st.selectbox(t("side.model"), list(labels), format_func=labels.get, key=prefix + "model_choice")
    spec = st.text_input(t("side.model_path"), key=prefix + "model_path") if choice == CUSTOM else choice
    return (spec or "").strip()


def chosen_dtype() -> str:
    """The sidebar's GPU precision (every model on a CPU runs in float32)."""
    return st.session_state.get("dtype", GPU_DTYPES[0]) if resolve_device() == "cuda" else "auto"


def _take_upload(prefix: str) -> None:
    """Put an uploaded file's text into the text box, or remember why it cannot be used."""
    state, upload = st.session_state, st.session_state.get(prefix + "upload")
    state.pop(prefix + "upload_error", None)
    if upload is None:
        return
    try:
        state[prefix + "text"] = decode_text(upload.getvalue(), upload.name, shared().settings.max_upload_bytes)
        state[prefix + "example"] = state[prefix + "loaded_example"] = CUSTOM
    except InputError as err:
        state[prefix + "upload_error"] = say(err)


def _text_edited(prefix: str) -> None:
    """Any edit of an example makes the text the user's own, so a shared link carries the edited text."""
    state = st.session_state
    example = state.get(prefix + "example")
    if example in EXAMPLES and state.get(prefix + "text") != EXAMPLES[example]["text"]:
        state[prefix + "example"] = state[prefix + "loaded_example"] = CUSTOM


def _text_input(prefix: str = "") -> str:
    """An example picker, the text box it fills and an upload; ``prefix`` keeps a compare side's own keys."""
    ids = [*EXAMPLES, CUSTOM]
    titles = {k: t(EXAMPLES[k]["title"]) for k in EXAMPLES} | {CUSTOM: t("side.own_text")}
    example = st.selectbox(t("side.example"), ids, format_func=titles.get, key=prefix + "example")
    if example != CUSTOM:
        st.caption(t(EXAMPLES[example]["teaches"]))
        if st.session_state.get(prefix + "loaded_example") != example:
            st.session_state[prefix + "text"] = EXAMPLES[example]["text"]  # an example fills the box; edits are kept
            st.session_state[prefix + "loaded_example"] = example
    max_chars = shared().settings.max_upload_bytes  # a paste is held to the upload limit
    text = st.text_area(t("side.text"), key=prefix + "text", height=180, max_chars=max_chars,
                        on_change=_text_edited, args=(prefix,))  # fmt: skip
    if st.session_state.get(prefix + "example") == CUSTOM and text.strip():  # how much of a text a link carries
        st.caption(t("side.not_in_url" if len(text) > URL_TEXT_LIMIT else "side.in_url", limit=URL_TEXT_LIMIT))
    limit_kb = shared().settings.max_upload_bytes // 1024
    st.file_uploader(t("side.upload", kb=limit_kb), type=["txt"], key=prefix + "upload", on_change=_take_upload,
                     args=(prefix,))  # fmt: skip
    if prefix + "upload_error" in st.session_state:
        st.error(st.session_state[prefix + "upload_error"])
    return text


def _token_count_caption(loaded: LoadedModel, text: str, add_bos: bool | None) -> None:
    limit = token_limit(loaded)
    n_tokens: int | None = 0
    try:
        n_tokens = len(encode(loaded.tokenizer, text, limit, add_bos=add_bos))
    except TokenLimitError as err:
        n_tokens = err.n_tokens  # None: too long to count in full
    except SinkscopeError:
        pass  # an empty text has no tokens
    over = n_tokens is None
    st.caption(t("side.token_count_over" if over else "side.token_count", n=n_tokens, limit=limit))


def choose_language() -> None:
    """This run's language: the picker's, else ?lang= in the URL, else the browser's, else English."""
    state = st.session_state
    if state.get("lang") not in LANGUAGES:
        state["lang"] = pick_language(st.query_params.get("lang"), st.context.locale)
    set_language(state["lang"])


def carry_over() -> None:
    """Keep shared widget values when the user moves to another page.

    A widget belongs to the page that drew it: Streamlit drops its value when another page's script
    runs. Writing the value back as plain session state lets the next page's widget start from it.
    """
    for key in CARRIED:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def sidebar() -> Request | None:
    """Draw the shared controls; return the request, or None with a message when there is none yet."""
    carry_over()
    restore_from_url(shared().settings, EXAMPLES)
    with st.sidebar:
        show_ignored()
        st.selectbox(t("side.language"), list(LANGUAGES), format_func=LANGUAGES.get, key="lang")
        st.page_link("views/definitions.py", label=t("side.definitions"), icon="📖")
        if resolve_device() == "cuda":
            st.selectbox(t("side.gpu_dtype"), GPU_DTYPES, key="dtype")
        return request_controls()


def request_controls(prefix: str = "") -> Request | None:
    """Model, text and BOS toggle; the request they make, or None with a message when there is none yet."""
    spec, dtype = _model_picker(prefix), chosen_dtype()
    if not spec:
        st.info(t("side.type_model"))
        return None
    try:
        loaded = get_model(spec, dtype)
    except SinkscopeError as err:
        st.error(say(err))
        return None
    st.text(loaded.info.badge(language()))
    text = _text_input(prefix)
    add_bos = None
    if has_bos(loaded.tokenizer):
        st.session_state.setdefault(prefix + "add_bos", adds_bos_by_default(loaded.tokenizer))
        # a compare side is half as wide as the sidebar's text: a shorter label
        label = t("compare.add_bos" if prefix else "side.add_bos", token=loaded.tokenizer.bos_token)
        add_bos = st.toggle(label, key=prefix + "add_bos", help=t("side.add_bos_help"))
    _token_count_caption(loaded, text, add_bos)
    truncate = st.session_state.get(prefix + "truncate_text") == text
    return Request(spec, dtype, text, add_bos, truncate=truncate)


def _token_limit_notice(request: Request, err: TokenLimitError, prefix: str) -> None:
    st.warning(t("common.too_long", error=say(err), limit=err.limit))
    if st.button(t("common.truncate", limit=err.limit), key=prefix + "truncate_button"):
        st.session_state[prefix + "truncate_text"] = request.text  # only this text: a new one is checked again
        st.rerun()


def analysis_of(request: Request, prefix: str = "") -> Analysis | None:
    """The analysis of ``request``, or None with a message on the page."""
    try:
        return Analysis(request, get_trace(request))
    except TokenLimitError as err:
        _token_limit_notice(request, err, prefix)
    except (SinkscopeError, RuntimeError, MemoryError) as err:  # a failed run must not end the session
        st.error(say(err) if isinstance(err, SinkscopeError) else t("common.model_failed", error=err))
    return None


def current_analysis(request: Request | None) -> Analysis | None:
    """The analysis of the sidebar's text; after an error, the message and the previous result.

    A session keeps only its last request: the result lives in the shared cache, bounded by bytes (a trace at
    512 tokens is about 37 MB, mostly its residual norms), and is computed again if it was evicted.
    """
    analysis = analysis_of(request) if request is not None else None
    if analysis is not None:
        st.session_state["last_request"] = request
        return analysis
    previous = st.session_state.get("last_request")
    if previous is None or previous == request:
        return None
    st.caption(t("common.previous_result"))
    return analysis_of(previous)
