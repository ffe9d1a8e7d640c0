"""One store's page in the Airflow plugin: its history over the last hours (changelog/history.py)
as inline SVG charts, two per row on a laptop screen, with the totals of the batches drawn."""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any

from deltastate.orchestration.charts import CHART_CSS, svg_chart

WINDOWS = (1, 6, 24, 168)  # hours offered as links
# Counts per micro-batch read best as bars; levels and rates as lines.
BARS = {"dead_letters"}
PAGE_CSS = ("body{font-family:sans-serif;margin:1.5em;max-width:1240px;color:#222}"
            ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:14px}"
            "figure{margin:0;border:1px solid #ddd;border-radius:6px;padding:8px 10px}"
            "figcaption{font-weight:600;margin-bottom:4px}figcaption small{font-weight:400;color:#666}"
            ".note{color:#8a6d00;font-size:90%;margin:40px 0;text-align:center}"
            "table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
            "nav a{margin-right:10px}")


def _epoch_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def render_store_page(history: dict[str, Any]) -> str:
    store = html.escape(history["store"])
    since, until = _epoch_ms(history["since"]), _epoch_ms(history["until"])
    # The charts share one time axis: from the oldest point drawn (a little before it) to now, so a
    # store that started minutes ago is not squeezed into the window's last pixels.
    oldest = min((s["points"][0][0] for s in history["series"].values() if s["points"]), default=since)
    start = max(since, oldest - (until - oldest) // 30)
    figures = []
    for name, series in history["series"].items():
        points = series["points"]
        caption = (f"<figcaption>{html.escape(series['title'])} <small>({html.escape(series['unit'])}, "
                   f"{len(points)} points)</small></figcaption>")
        if points:
            body = svg_chart(name, series["title"], series["unit"], points, start, until, bars=name in BARS)
        else:
            body = f"<p class='note' id='note-{name}'>no data: {html.escape(history['notes'].get(name, ''))}</p>"
        figures.append(f"<figure id='figure-{name}'>{caption}{body}</figure>")
    totals = history["totals"]
    head = "".join(f"<th>{html.escape(k.replace('_', ' '))}</th>" for k in ("batches", *totals))
    cells = "".join(f"<td>{v:,}</td>" for v in (history["batch_count"], *totals.values()))
    windows = "".join(f"<a href='?hours={h}'>{h} h</a>" for h in WINDOWS)
    return (
        # An empty icon: the browser asks for /favicon.ico otherwise, and the 404 is a console error.
        "<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
        f"<title>{store}: deltastate store</title><style>{PAGE_CSS}{CHART_CSS}</style></head><body>"
        f"<nav><a href='../stores'>all stores</a> · last {windows} · "
        f"<a href='../api/stores/{store}/history?hours={history['hours']:g}'>JSON</a></nav>"
        f"<h1>{store}</h1><p>{html.escape(history['store_type'])} store reading topic "
        f"<code>{html.escape(history['topic'])}</code>; the last {history['hours']:g} h, "
        f"{html.escape(history['since'][:19])} to {html.escape(history['until'][:19])} UTC, from the store's "
        "intake audit, changelog log and checkpoint (no Prometheus needed).</p>"
        f"<table id='totals'><tr>{head}</tr><tr>{cells}</tr></table>"
        f"<div class='charts'>{''.join(figures)}</div>"
        "<p><small>Throughput: records in / batch time. Batch time: the batch's start in Spark's offset "
        "log to its audit commit. Freshness: the audit commit's time minus the newest event time applied. "
        "Consumer lag: records in the topic at the commit's time not yet read; the last point is now. "
        "State size: the changelog's live Delta files.</small></p></body></html>")


__all__ = ["render_store_page"]
