"""The sidebar the entry draws once for every page: the text (example, typed or uploaded), its BOS toggle and token
count, the model and its badge, the language."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from sinkscope.core.bundled import BUNDLED
from sinkscope.core.errors import InputError, SinkscopeError, TokenLimitError
from sinkscope.core.i18n import LANGUAGES
from sinkscope.core.models import LoadedModel, resolve_device
from sinkscope.core.tokens import adds_bos_by_default, decode_text, has_bos
from sinkscope.serving.settings import Settings

from views import frame
from views.state.cache import cached_model, shared, token_limit
from views.state.session import EXAMPLES, GPU_DTYPES, KEEP, LANGUAGE_EXAMPLES, Request, chosen_dtype
from views.state.url_state import CUSTOM, URL_TEXT_LIMIT, restore_from_url
from views.text import language, say, t

UPLOAD_LIMIT_HIDDEN = "<style>[data-testid='stFileUploaderDropzoneInstructions'] {display: none;}</style>"


def model_choices(config: Settings) -> dict[str, str]:
    """Selectbox options: the allowed bundled models, plus a free field outside hosted mode. A hosted app offers
    only the models it has installed: its visitors cannot install one."""
    labels = {
        key: spec.label + ("" if spec.installed() else t("side.not_installed"))
        for key, spec in BUNDLED.items()
        if config.allows(key) and (spec.installed() or not config.hosted)
    }
    if not config.hosted:
        labels[CUSTOM] = t("side.other_model")
    return labels


def _model_picker(prefix: str = "") -> str:
    config = shared().settings
    labels = model_choices(config)
    choice = st.selectbox(t("side.model"), list(labels), format_func=labels.get, key=prefix + "model_choice",
                          persist_state=KEEP)  # fmt: skip
    spec = (
        st.text_input(t("side.model_path"), key=prefix + "model_path", persist_state=KEEP)
        if choice == CUSTOM
        else choice
    )
    return (spec or "").strip()


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
    """Any edit of an example makes the text the user's own, so a shared link carries the edited text; a text
    over the box's limit is refused whole (a cut nobody asked for) and the one before it kept."""
    state, limit = st.session_state, shared().settings.max_text_chars
    state.pop(prefix + "text_error", None)
    if len(state.get(prefix + "text", "")) > limit:
        state[prefix + "text_error"] = t("side.text_too_long", n=len(state[prefix + "text"]), limit=limit)
        state[prefix + "text"] = state.get(prefix + "text_kept", "")
        return
    example = state.get(prefix + "example")
    if example in EXAMPLES and state.get(prefix + "text") != EXAMPLES[example]["text"]:
        state[prefix + "example"] = state[prefix + "loaded_example"] = CUSTOM


def _text_input(prefix: str = "") -> str:
    """An example picker, the text box it fills and an upload; ``prefix`` keeps a compare side's own keys."""
    ids = [*EXAMPLES, CUSTOM]
    titles = {k: t(EXAMPLES[k]["title"]) for k in EXAMPLES} | {CUSTOM: t("side.own_text")}
    st.session_state.setdefault(prefix + "example", LANGUAGE_EXAMPLES.get(language(), ids[0]))
    example = st.selectbox(t("side.example"), ids, format_func=titles.get, key=prefix + "example", persist_state=KEEP)
    if example != CUSTOM:
        st.caption(t(EXAMPLES[example]["teaches"]))
        if st.session_state.get(prefix + "loaded_example") != example:
            st.session_state[prefix + "text"] = EXAMPLES[example]["text"]  # an example fills the box; edits are kept
            st.session_state[prefix + "loaded_example"] = example
            st.session_state.pop(prefix + "text_error", None)
    # no max_chars: Streamlit's box drops a longer paste without a word; _text_edited refuses it and says why
    text = st.text_area(t("side.text"), key=prefix + "text", height=180, on_change=_text_edited, args=(prefix,),
                        persist_state=KEEP)  # fmt: skip
    st.session_state[prefix + "text_kept"] = text
    if prefix + "text_error" in st.session_state:
        st.error(st.session_state[prefix + "text_error"])
    if st.session_state.get(prefix + "example") == CUSTOM and text.strip():  # how much of a text a link carries
        st.caption(t("side.not_in_url" if len(text) > URL_TEXT_LIMIT else "side.in_url", limit=URL_TEXT_LIMIT))
    limit_kb = shared().settings.max_upload_bytes // 1024
    st.html(UPLOAD_LIMIT_HIDDEN)  # Streamlit's own line counts whole megabytes: the label above says the real limit
    st.file_uploader(t("side.upload", kb=limit_kb), type=["txt"], key=prefix + "upload", on_change=_take_upload,
                     args=(prefix,), max_upload_size=max(1, -(-limit_kb // 1024)))  # fmt: skip
    if prefix + "upload_error" in st.session_state:
        st.error(st.session_state[prefix + "upload_error"])
    return text


def _token_count_caption(loaded: LoadedModel, text: str, add_bos: bool | None) -> None:
    limit = token_limit(loaded)
    n_tokens: int | None = 0
    try:
        n_tokens = len(loaded.encode(text, limit, add_bos=add_bos))
    except TokenLimitError as err:
        n_tokens = err.n_tokens  # None: too long to count in full
    except SinkscopeError:
        pass  # an empty text has no tokens
    over = n_tokens is None
    st.caption(t("side.token_count_over" if over else "side.token_count", n=n_tokens, limit=limit))


def sidebar() -> frame.Context:
    """Draw the shared sidebar, the text first (a newcomer types without scrolling), then the model and the
    language; return the context every page is handed. A model that fails to load says so at the top of the stage
    and gives the page no request, so no figure of another model stays on screen under its name."""
    restore_from_url(shared().settings, EXAMPLES)
    stage_top = st.container()  # the main area's first element: above the page's title
    with st.sidebar:
        notices, text_area, model_area = st.container(), st.container(), st.container()
        st.selectbox(t("side.language"), list(LANGUAGES), format_func=LANGUAGES.get, key="lang", persist_state=KEEP)
        if resolve_device() == "cuda":
            st.selectbox(t("side.gpu_dtype"), GPU_DTYPES, key="dtype", persist_state=KEEP)
    with model_area:
        spec, loaded = _model_controls("", lambda spec, err: frame.load_failed(stage_top, spec, err))
    with text_area:
        text = _text_input()
        add_bos = None if loaded is None else _bos_and_count(loaded, text)
    if loaded is None:
        return frame.Context(None, notices)
    truncate = st.session_state.get("truncate_text") == text
    return frame.Context(Request(spec, chosen_dtype(), text, add_bos, truncate, loaded), notices)


def _model_controls(prefix: str, failed: Callable[[str, SinkscopeError], None]) -> tuple[str, LoadedModel | None]:
    """The model picker and the chosen model's badge: (its spec, the model); None when there is no model yet, or
    when it failed to load (``failed`` says so)."""
    spec = _model_picker(prefix)
    if not spec:
        st.info(t("side.type_model"))
        return spec, None
    try:
        with st.spinner(t("side.loading_model")):
            loaded = cached_model(spec, chosen_dtype())
    except SinkscopeError as err:
        failed(spec, err)
        return spec, None
    st.text(loaded.info.badge(language()))
    return spec, loaded


def _bos_and_count(loaded: LoadedModel, text: str, prefix: str = "") -> bool | None:
    """The BOS toggle where the tokenizer has one, and the token count against the limit."""
    add_bos = None
    if has_bos(loaded.tokenizer):
        st.session_state.setdefault(prefix + "add_bos", adds_bos_by_default(loaded.tokenizer))
        # a compare side is half as wide as the sidebar's text: a shorter label
        label = t("compare.add_bos" if prefix else "side.add_bos", token=loaded.tokenizer.bos_token)
        add_bos = st.toggle(label, key=prefix + "add_bos", help=t("side.add_bos_help"), persist_state=KEEP)
    _token_count_caption(loaded, text, add_bos)
    return add_bos


def request_controls(prefix: str) -> Request | None:
    """A compare side's model, text and BOS toggle; the request they make, or None with a message."""
    spec, loaded = _model_controls(prefix, lambda _spec, err: st.error(say(err)))
    if loaded is None:
        return None
    text = _text_input(prefix)
    add_bos = _bos_and_count(loaded, text, prefix)
    truncate = st.session_state.get(prefix + "truncate_text") == text
    return Request(spec, chosen_dtype(), text, add_bos, truncate, loaded)
