"""The plugin's FastAPI app, mounted by Airflow's API server under /deltastate:
    /deltastate/stores                 an HTML page listing the stores (the UI's nav entry frames it)
    /deltastate/stores/{store}         one store's charts over the last hours (?hours=N, default 6)
    /deltastate/api/stores             the list as JSON
    /deltastate/api/stores/{store}/history?hours=N   the store's time series as JSON
    /deltastate/data-docs/             great-expectations Data Docs of the project home
Reads only files under DELTASTATE_HOME (snapshot metadata, Delta logs, the audit's parquet files,
Spark's offset log) and the topic's offsets from Kafka, never Spark."""

from __future__ import annotations

import html
import math
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from deltastate.changelog.history import store_history
from deltastate.config import Settings, load_settings
from deltastate.errors import DeltastateError
from deltastate.orchestration.status import store_statuses
from deltastate.orchestration.store_page import render_store_page
from deltastate.quality.validate import data_docs_index
from deltastate.stores import list_stores

COLUMNS = ("store", "store_type", "topic", "snapshot_version", "published_at", "staleness_s",
           "snapshot_changelog_version", "changelog_version", "versions_behind", "rows")


MAX_HOURS = 24 * 31
DEFAULT_HOURS = 6


def _cell(value: object) -> str:
    return "—" if value is None else html.escape(str(value))


def parse_hours(text: str | None) -> float:
    """?hours=: a number of hours above 0 and at most MAX_HOURS; ValueError naming what is wrong."""
    if text is None:
        return DEFAULT_HOURS
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not (0 < hours <= MAX_HOURS):  # also refuses nan and inf
        raise ValueError(f"hours must be a number above 0 and at most {MAX_HOURS}, got {text!r}")
    return hours


def render_page(settings: Settings) -> str:
    rows = []
    for s in store_statuses(settings):
        d = s.to_dict()
        cells = "".join(f"<td class='{c}'>{_cell(d[c])}</td>" for c in COLUMNS[1:])
        link = f"<td class='store'><a href='stores/{html.escape(s.store)}'>{html.escape(s.store)}</a></td>"
        cells = link + cells
        rows.append(f"<tr id='{html.escape(s.store)}'>{cells}</tr>")
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in COLUMNS)
    docs = "<a href='data-docs/index.html'>Data Docs</a>" if data_docs_index(settings).is_file() \
        else "no Data Docs yet (they appear after the first validation)"
    return ("<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'><title>deltastate stores</title>"
            "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
            f"<h1>deltastate stores</h1><p>home: {html.escape(str(settings.home))} · {docs}</p>"
            f"<table id='stores'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "<p>staleness: seconds since the current snapshot was published; versions behind: changelog "
            "commits not in the snapshot yet. A store's name opens its charts.</p></body></html>")


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(title="deltastate stores")

    def current() -> Settings:
        return settings or load_settings()  # read per request: the environment is the configuration

    @app.get("/stores", response_class=HTMLResponse)
    def stores_page() -> str:
        return render_page(current())

    @app.get("/api/stores")
    def stores_json() -> list[dict]:
        return [s.to_dict() for s in store_statuses(current())]

    def history(store: str, hours: str | None) -> dict:
        settings_now = current()
        try:
            window = parse_hours(hours)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        declared = list_stores(settings_now)
        if store not in declared:
            raise HTTPException(404, f"unknown store {store!r}; declared stores: {', '.join(declared)}")
        try:
            return store_history(settings_now, store, window)
        except (DeltastateError, ValueError) as exc:  # a log or table this reader cannot follow
            raise HTTPException(500, f"store {store!r}: {exc}") from None

    @app.get("/api/stores/{store}/history")
    def history_json(store: str, hours: str | None = None) -> dict:
        return history(store, hours)

    @app.get("/stores/{store}", response_class=HTMLResponse)
    def store_page(store: str, hours: str | None = None) -> HTMLResponse:
        try:
            return HTMLResponse(render_store_page(history(store, hours)))
        except HTTPException as exc:  # the page answers a refusal in a sentence, with the same status
            return HTMLResponse(f"<!doctype html><p>{html.escape(str(exc.detail))}</p>", status_code=exc.status_code)

    @app.get("/")
    def root() -> RedirectResponse:
        return RedirectResponse("stores")

    # check_dir=False: the folder appears with the first validation; importing the plugin creates nothing.
    docs_dir: Path = data_docs_index(current()).parent
    app.mount("/data-docs", StaticFiles(directory=str(docs_dir), html=True, check_dir=False), name="data-docs")
    return app
