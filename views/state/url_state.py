"""The view in the URL: restored on a session's first run, rewritten on every run, so links share it."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from urllib.parse import urlencode

import streamlit as st
from sinkscope.core.bundled import BUNDLED
from sinkscope.core.errors import shortened
from sinkscope.core.i18n import LANGUAGES, Message
from sinkscope.core.names import HEAD_METRICS
from sinkscope.serving.settings import Settings

from views.text import plain, say, t

CUSTOM = "custom"
URL_TEXT_LIMIT = 1500  # longer custom texts are not put in the URL
NAMED_VALUES = 6  # a notice names this many of a link's unusable values and counts the rest
VALUE_CHARS = 40  # each cut to this length: a hostile link's 10,000-character value stays one short line


def _flag(value: str) -> bool:
    if value not in ("0", "1"):
        raise ValueError(value)
    return value == "1"


def _metric(value: str) -> str:
    if value not in HEAD_METRICS:
        raise ValueError(value)
    return value


def _index(value: str) -> int:
    """A layer or head: an integer from 0 (the page clamps it to the model's last one)."""
    index = int(value)
    if index < 0:
        raise ValueError(value)
    return index


def _eps(value: str) -> float:
    """The sink-rate threshold on the explorer's slider: 0.05 ... 0.95 in steps of 0.05."""
    eps = float(value)
    if not math.isfinite(eps) or not EPS_RANGE[0] <= eps <= EPS_RANGE[1]:
        raise ValueError(value)
    return round(round(eps / EPS_STEP) * EPS_STEP, 2)


EPS_RANGE, EPS_STEP = (0.05, 0.95), 0.05


def _tab(value: str) -> str:
    if value not in TAB_IDS:
        raise ValueError(value)
    return value


TAB_IDS = ("map", "one", "all", "depth")  # the explorer's tabs, by a stable id (their labels are translated)
FIELDS = {"layer": _index, "head": _index, "metric": _metric, "eps": _eps, "tab_id": _tab}
FLAGS = ("add_bos", "log_scale", "past_sink", "value_units")


def ignore(param: str, value: str) -> None:
    """Note a link's value the app cannot use: shown once, with every other one, where the page draws notices."""
    st.session_state.setdefault("url_ignored", []).append(f"{param}={value}")


def refuse(key: str, **params: object) -> None:
    """Note a link's value the app refuses for a reason of its own (a text over the box's limit): its own notice."""
    st.session_state.setdefault("url_refused", []).append(Message.of(key, **params))


def show_ignored() -> None:
    """The link's unusable values as one notice, and each refusal as its own, on the run that found them."""
    for message in st.session_state.pop("url_refused", []):
        st.warning(say(message))
    ignored = list(dict.fromkeys(st.session_state.pop("url_ignored", [])))
    if not ignored:
        return
    values = ", ".join(plain(shortened(value, VALUE_CHARS)) for value in ignored[:NAMED_VALUES])
    if len(ignored) > NAMED_VALUES:
        values = t("side.url_ignored_more", values=values, n=len(ignored) - NAMED_VALUES)
    st.warning(t("side.url_ignored", values=values))


def _note_repeats(params: st.runtime.state.QueryParamsProxy) -> None:
    """A key the link gives twice (``step=2&step=5``): the app reads the last; the others are named."""
    for key in params:
        for value in params.get_all(key)[:-1]:
            ignore(key, value)


def _restore_model(model: str | None, config: Settings, prefix: str = "") -> None:
    state = st.session_state
    if not model:
        return
    if not config.allows(model):  # a hosted app opens only the models it lists
        ignore(prefix + "model", model)
        return
    if model in BUNDLED and config.hosted and not BUNDLED[model].installed():  # its visitors cannot install one
        refuse("side.url_model_missing", model=BUNDLED[model].label)
        return
    if model in BUNDLED:
        state[prefix + "model_choice"] = model
    elif not config.hosted:
        state[prefix + "model_choice"], state[prefix + "model_path"] = CUSTOM, model


def _restore_text(params: Mapping[str, str], examples: Collection[str], config: Settings, prefix: str = "") -> None:
    state = st.session_state
    if prefix + "text" in params and len(params[prefix + "text"]) > config.max_text_chars:
        refuse("side.url_text_too_long", n=len(params[prefix + "text"]), limit=config.max_text_chars)
    elif prefix + "text" in params:
        state[prefix + "example"] = state[prefix + "loaded_example"] = CUSTOM
        state[prefix + "text"] = params[prefix + "text"]
    elif params.get(prefix + "example") in examples:
        state[prefix + "example"] = params[prefix + "example"]
    elif prefix + "example" in params:
        ignore(prefix + "example", params[prefix + "example"])


def restore_from_url(config: Settings, examples: Collection[str]) -> None:
    """On a session's first run, put the view the URL describes into the widgets' state."""
    state, params = st.session_state, st.query_params
    if state.get("url_restored"):
        return
    state["url_restored"] = True
    _note_repeats(params)
    _restore_model(params.get("model"), config)
    _restore_text(params, examples, config)
    if "lang" in params and params["lang"].strip().lower()[:2] not in LANGUAGES:
        ignore("lang", params["lang"])
    parsers = FIELDS | dict.fromkeys(FLAGS, _flag)
    for key, parse in parsers.items():
        try:
            if key in params:
                state[key] = parse(params[key])
        except ValueError:
            ignore(key, params[key])  # a hand-edited URL: keep the default and say so once


def restore_side(prefix: str, params: Mapping[str, str], config: Settings, examples: Collection[str]) -> None:
    """One side of the compare page from ``<prefix>model``, ``<prefix>example`` or ``<prefix>text``, ``<prefix>bos``."""
    _restore_model(params.get(prefix + "model"), config, prefix)
    _restore_text(params, examples, config, prefix)
    try:
        if prefix + "bos" in params:
            st.session_state[prefix + "add_bos"] = _flag(params[prefix + "bos"])
    except ValueError:
        ignore(prefix + "bos", params[prefix + "bos"])


def _text_params(prefix: str = "") -> dict[str, str | None]:
    """The model and the example (or own text, when short enough for a link) under ``prefix``."""
    state = st.session_state
    custom_model = state.get(prefix + "model_choice") == CUSTOM
    params = {
        prefix + "model": state.get(prefix + "model_path") if custom_model else state.get(prefix + "model_choice")
    }
    if state.get(prefix + "example") != CUSTOM:
        params[prefix + "example"] = state.get(prefix + "example")
    elif len(state.get(prefix + "text", "")) <= URL_TEXT_LIMIT:
        params[prefix + "text"] = state.get(prefix + "text")
    return params


def sync_sides(prefixes: Collection[str]) -> None:
    """The compare page's URL: both sides and the language."""
    state, params = st.session_state, {"lang": st.session_state.get("lang")}
    for prefix in prefixes:
        params |= _text_params(prefix)
        if prefix + "add_bos" in state:
            params[prefix + "bos"] = str(int(state[prefix + "add_bos"]))
    st.query_params.from_dict({k: v for k, v in params.items() if v not in (None, "")})


def view_params() -> dict[str, str]:
    """The current view: model, text, language, layer, head and the other fields a link carries."""
    state = st.session_state
    params = _text_params()
    params["lang"] = state.get("lang")
    params |= {key: str(state[key]) for key in FIELDS if key in state}
    params |= {key: str(int(state[key])) for key in FLAGS if key in state}
    return {k: v for k, v in params.items() if v not in (None, "")}


def current_query() -> str:
    """The current view as a query string, for a link to another page that should open on it."""
    return urlencode(view_params())


def sync_url(extra: Mapping[str, str] | None = None) -> None:
    """Write the current view (and a page's own ``extra`` fields) into the URL, so copying it shares this view."""
    st.query_params.from_dict(view_params() | dict(extra or {}))
