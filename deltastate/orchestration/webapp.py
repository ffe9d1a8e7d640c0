"""The plugin's FastAPI app, mounted by Airflow's API server under /deltastate:
    /deltastate/stores       an HTML page listing the stores (the UI's nav entry frames it)
    /deltastate/api/stores   the same as JSON
    /deltastate/data-docs/   great-expectations Data Docs of the project home
Reads only files under DELTASTATE_HOME (snapshot metadata, Delta log names), never Spark."""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from deltastate.config import Settings, load_settings
from deltastate.orchestration.status import store_statuses
from deltastate.quality.validate import data_docs_index

COLUMNS = ("store", "store_type", "topic", "snapshot_version", "published_at", "staleness_s",
           "snapshot_changelog_version", "changelog_version", "versions_behind", "rows")


def _cell(value: object) -> str:
    return "—" if value is None else html.escape(str(value))


def render_page(settings: Settings) -> str:
    rows = []
    for s in store_statuses(settings):
        d = s.to_dict()
        cells = "".join(f"<td class='{c}'>{_cell(d[c])}</td>" for c in COLUMNS)
        rows.append(f"<tr id='{html.escape(s.store)}'>{cells}</tr>")
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in COLUMNS)
    docs = "<a href='data-docs/index.html'>Data Docs</a>" if data_docs_index(settings).is_file() \
        else "no Data Docs yet (they appear after the first validation)"
    return ("<!doctype html><html><head><meta charset='utf-8'><title>deltastate stores</title>"
            "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
            f"<h1>deltastate stores</h1><p>home: {html.escape(str(settings.home))} · {docs}</p>"
            f"<table id='stores'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "<p>staleness: seconds since the current snapshot was published; versions behind: changelog "
            "commits not in the snapshot yet.</p></body></html>")


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

    @app.get("/")
    def root() -> RedirectResponse:
        return RedirectResponse("stores")

    # check_dir=False: the folder appears with the first validation; importing the plugin creates nothing.
    docs_dir: Path = data_docs_index(current()).parent
    app.mount("/data-docs", StaticFiles(directory=str(docs_dir), html=True, check_dir=False), name="data-docs")
    return app
