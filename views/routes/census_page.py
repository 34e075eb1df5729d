"""Census: sink rates over a whole corpus, per model, window length, layer and head (``sinkscope census``)."""

from __future__ import annotations

import hashlib
import io
from functools import partial
from pathlib import Path

import pandas as pd
import streamlit as st
from sinkscope.census import stats as census_stats
from sinkscope.census.files import MANIFEST, read_heads
from sinkscope.census.table import Limits
from sinkscope.core.errors import InputError
from sinkscope.core.names import DEFAULT_EPS
from sinkscope.findings import sources
from sinkscope.plot.census_figures import fig_census_kinds, fig_census_layers, fig_census_rate, fig_census_spread

from views.frame import Context
from views.state import cache, session
from views.state.session import KEEP
from views.text import language, local_table, num, say, t
from views.widgets import charts, jobs
from views.widgets.sliders import EPS_STEPS, decimal_slider

SHIPPED = session.ASSETS / "census"
FOLDER, UPLOAD = "folder", "upload"


def limits() -> Limits:
    config = cache.shared().settings
    return Limits(rows=config.max_census_rows, decoded_bytes=config.max_census_mb * 1024 * 1024)


def load_folder(path: str, changed: float) -> pd.DataFrame:
    """A census folder's heads table, in the shared byte-bounded cache; ``changed`` (its manifest's time)
    reloads a census that grew."""
    run = partial(read_heads, Path(path), limits=limits())
    return jobs.run(cache.Job("census", ("folder", path, changed), cache.one_step(run)), t("census.reading"))


def load_upload(data: bytes, name: str) -> pd.DataFrame:
    """An uploaded table, in the same cache as every other result (per session and in all), keyed by its bytes;
    refused from its metadata when it would expand past the limits."""
    run = partial(read_heads, data, name, limits())
    return jobs.run(
        cache.Job("census", ("upload", hashlib.sha256(data).hexdigest(), name), cache.one_step(run)),
        t("census.reading"),
    )


def shipped() -> dict[str, Path]:
    return {folder.name: folder for folder in sorted(SHIPPED.iterdir()) if (folder / MANIFEST).exists()}


def source_title(key: str) -> str:
    return {FOLDER: t("census.own_folder"), UPLOAD: t("census.upload")}.get(key, t("census.shipped", name=key))


def chosen_census() -> pd.DataFrame | None:
    """The census the user picked: a shipped one, an uploaded Parquet file, or (not hosted) any folder."""
    config = cache.shared().settings
    options = [*shipped(), *([] if config.hosted else [FOLDER]), UPLOAD]
    choice = st.selectbox(
        t("census.source"), options, format_func=source_title, key="census_source", persist_state=KEEP
    )
    try:
        if choice == UPLOAD:
            limit_kb = config.max_upload_bytes // 1024
            upload = st.file_uploader(t("census.upload_help", kb=limit_kb), type=["parquet"], key="census_upload")
            if upload is None:
                return None
            if upload.size > config.max_upload_bytes:
                raise InputError("error.file_too_large", name=upload.name, kb=upload.size // 1024, limit=limit_kb)
            return load_upload(upload.getvalue(), upload.name)
        folder = (
            Path(st.text_input(t("census.folder"), key="census_folder", persist_state=KEEP))
            if choice == FOLDER
            else shipped()[choice]
        )
        if choice == FOLDER and not (folder / "heads").is_dir():
            st.info(t("census.folder_help"))
            return None
        manifest = folder / MANIFEST
        return load_folder(str(folder), manifest.stat().st_mtime if manifest.exists() else 0.0)
    except InputError as err:
        st.error(say(err))
        return None


def overview(heads: pd.DataFrame, eps: float) -> None:
    windows = heads[["model", "length", "doc_id", "start"]].drop_duplicates()
    cells = st.columns(3)
    cells[0].metric(t("census.models"), heads["model"].nunique())
    cells[1].metric(t("census.documents"), heads["doc_id"].nunique())
    cells[2].metric(t("census.windows"), len(windows))
    rates = census_stats.rate_by_length(heads, eps)
    left, right = st.columns(2)
    charts.show(fig_census_rate(rates, eps, lang=language()), "census_rate", left)
    left.caption(t("census.rate_help"))
    charts.show(fig_census_layers(census_stats.sink_by_layer(heads), lang=language()), "census_layers", right)


def per_model(heads: pd.DataFrame) -> None:
    """The spread of sink scores and the head kinds per layer, one column per model (at most two)."""
    lengths = sorted(heads["length"].unique())
    length = st.select_slider(t("census.length"), lengths, value=lengths[-1], key="census_length")
    models = sorted(heads["model"].unique())[:2]
    for column, model in zip(st.columns(len(models)), models, strict=True):
        spread = census_stats.sink_spread(heads, model, length)
        title = t("census.spread_title", model=model, n=length)
        charts.show(fig_census_spread(spread, title, lang=language()), f"spread_{model}", column)
        shares = census_stats.kinds_by_layer(heads, model, length)
        title = t("census.kinds_title", model=model, n=length)
        charts.show(fig_census_kinds(shares, title, lang=language()), f"kinds_{model}", column)


def steady(heads: pd.DataFrame, eps: float) -> None:
    st.subheader(t("census.steady_title", eps=num(eps, ".2f"), share=round(100 * census_stats.STEADY)))
    table = census_stats.steady_sinks(heads, eps)
    if table.empty:
        st.info(t("census.steady_none", share=round(100 * census_stats.STEADY)))
        return
    shown = table.assign(docs_share=100 * table["docs_share"]).rename(columns={
        "model": t("census.model"), "length": t("census.length_column"), "layer": t("fig.layer"),
        "head": t("fig.head"), "docs_share": t("census.docs_share"), "sink": t("census.mean_sink")})  # fmt: skip
    st.dataframe(local_table(shown, precision=3), hide_index=True, height=300, key="steady_table")


def page(_context: Context) -> None:  # the sidebar's text is not read here
    """Census: sink rates over a whole corpus, per model, window length, layer and head."""
    st.title(t("census.title"))
    st.caption(t("census.intro", level=round(100 * census_stats.LEVEL)))
    heads = chosen_census()
    if heads is None:
        return
    charts.computed_on(sources.corpus())
    st.session_state.setdefault("census_eps", DEFAULT_EPS)
    eps = decimal_slider(st, t("explorer.eps"), EPS_STEPS, DEFAULT_EPS, "census_eps")
    overview(heads, eps)
    per_model(heads)
    steady(heads, eps)
    download = partial(parquet_bytes, heads)  # built only when clicked
    st.download_button(t("census.download"), download, "census-heads.parquet", on_click="ignore")


def parquet_bytes(table: pd.DataFrame) -> bytes:
    data = io.BytesIO()
    table.to_parquet(data, index=False)
    return data.getvalue()
