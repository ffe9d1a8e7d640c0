"""The plugin's store pages, drawn from the store's own audit (real broker, Spark, Delta; a headless
Chromium for the page).

player_stats runs over two loads, each split into several micro-batches, with invalid records
among them; a third load is produced and left unread. The history JSON must hold every batch the
run reported, records in summing to what was produced, dead letters equal to the invalid records,
the changelog's rows and bytes as Spark counts them, freshness bounded by the run's wall clock and
the newest event time produced, and a consumer lag now equal to the unread load. The page is then
opened in Chromium: every chart is drawn with a marker per data point, and the console is clean.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from support.local_infra import free_port, make_home
from support.store_checks import PARTITIONS, STORE, event, produce

from deltastate.engine import run_store
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.producer import ensure_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

LOADS = [(500, 3), (300, 2)]  # (valid events, invalid records) per load, each run once
UNREAD = 120  # produced after the last run: the lag now
MAX_OFFSETS = 160  # per trigger: each load takes several micro-batches


def _invalid(n: int, i: int) -> list[tuple[bytes, bytes]]:
    bad = [b"{not json", event("p-bad", -1, 1), b'{"player_id": "p-bad"}']
    return [(b"p-bad", bad[(i + k) % len(bad)]) for k in range(n)]


@pytest.fixture(scope="module")
def ran(tmp_path_factory, session_settings, broker, spark):
    home = make_home(tmp_path_factory.mktemp("store-pages"))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    topic = f"t-{uuid.uuid4().hex[:10]}"
    assert ensure_topic(broker, topic, PARTITIONS) is True
    now_ms = int(time.time() * 1000)
    # Event times in the last ten minutes, so freshness reads as seconds, not years.
    events = list(leaderboard_events(sum(n for n, _ in LOADS) + UNREAD, 80, seed=7, start_ts=now_ms - 600_000))
    as_kafka = [(k.encode(), encode(e)) for k, e in events]
    reports, runs, produced, newest_ts, start = [], [], 0, 0, 0
    for i, (valid, invalid) in enumerate(LOADS):
        load = as_kafka[start:start + valid]
        newest_ts = max([newest_ts] + [e["ts"] for _, e in events[start:start + valid]])
        start += valid
        records = load[:valid // 2] + _invalid(invalid, i) + load[valid // 2:]
        produce(settings, topic, records)
        produced += len(records)
        began = time.time()
        run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=MAX_OFFSETS,
                  listener=reports.append)
        runs.append((began, time.time()))
    produce(settings, topic, as_kafka[start:start + UNREAD])
    changelog = spark.read.format("delta").load(settings.table_path(STORE, "changelog"))
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{settings.table_path(STORE, 'changelog')}`").first()
    return {"settings": settings, "topic": topic, "reports": [r for r in reports if r.records_in],
            "produced": produced, "invalid": sum(n for _, n in LOADS), "newest_ts": newest_ts, "runs": runs,
            "changelog_rows": changelog.count(), "changelog_bytes": int(detail["sizeInBytes"])}


def _browser():
    """Headless Chromium as the Airflow browser test drives it, with the console log kept."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail("Debian's chromium and chromium-driver are required (make test installs them via scripts/setup.sh)")
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1366,1400"):
        options.add_argument(arg)
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(driver))
    browser.implicitly_wait(30)
    return browser


def _client(settings):
    from fastapi.testclient import TestClient

    from deltastate.orchestration.webapp import create_app

    return TestClient(create_app(settings))


def test_history_json_matches_what_was_produced_and_run(ran):
    client = _client(ran["settings"])
    answer = client.get(f"/api/stores/{STORE}/history", params={"hours": "1"})
    assert answer.status_code == 200, answer.text
    h = answer.json()
    reports = ran["reports"]
    assert h["topic"] == ran["topic"] and h["batch_count"] == len(reports) >= 4
    # Every batch the run reported, with its records; together, everything produced and read.
    assert sorted(b["records_in"] for b in h["batches"]) == sorted(r.records_in for r in reports)
    assert h["totals"]["records_in"] == sum(b["records_in"] for b in h["batches"]) == ran["produced"]
    assert h["totals"]["dead_lettered"] == ran["invalid"]
    series = {name: s["points"] for name, s in h["series"].items()}
    assert sum(v for _, v in series["dead_letters"]) == ran["invalid"] and h["notes"] == {}
    # Batch time within the run that holds the batch; throughput is records over it.
    first, last = ran["runs"][0][0] * 1000, ran["runs"][-1][1] * 1000
    assert len(series["batch_s"]) == len(reports)
    for (at, seconds), (_, rate), batch in zip(series["batch_s"], series["records_per_s"], h["batches"]):
        assert first <= at <= last and 0 < seconds <= (last - first) / 1000
        assert rate == pytest.approx(batch["records_in"] / seconds, rel=0.01)
    # Freshness of the newest batch: its commit (inside the last run) minus the newest event produced.
    at, freshness = series["freshness_s"][-1]
    began, ended = ran["runs"][-1]
    assert began * 1000 <= at <= ended * 1000
    assert (began * 1000 - ran["newest_ts"]) / 1000 - 0.01 <= freshness <= (ended * 1000 - ran["newest_ts"]) / 1000 + 0.01
    # Lag: the unread load now; state size: the changelog as Spark sees it.
    assert series["lag"][-1][1] == UNREAD and len(series["lag"]) == len(reports) + 1
    assert series["state_rows"][-1][1] == ran["changelog_rows"]
    assert series["state_bytes"][-1][1] == ran["changelog_bytes"]


def test_bad_hours_and_unknown_store_are_refused_in_a_sentence(ran):
    client = _client(ran["settings"])
    for hours in ("abc", "0", "-2", "nan", "100000"):
        answer = client.get(f"/api/stores/{STORE}/history", params={"hours": hours})
        assert answer.status_code == 400
        assert answer.json()["detail"] == f"hours must be a number above 0 and at most 744, got {hours!r}"
    answer = client.get("/api/stores/nope/history", params={"hours": "2"})
    assert answer.status_code == 404 and answer.json()["detail"].startswith("unknown store 'nope'; declared stores: ")
    page = client.get("/stores/nope")
    assert page.status_code == 404 and "unknown store &#x27;nope&#x27;" in page.text


@pytest.fixture()
def served(ran):
    import uvicorn

    from deltastate.orchestration.webapp import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(ran["settings"]), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_store_page_draws_every_chart_in_chromium(served, tmp_path: Path):
    from selenium.webdriver.common.by import By

    history = httpx.get(f"{served}/api/stores/{STORE}/history", params={"hours": "6"}).json()
    browser = _browser()  # a laptop's width; tall enough for every chart in one shot
    try:
        browser.get(f"{served}/stores")
        browser.find_element(By.LINK_TEXT, STORE).click()
        assert browser.find_element(By.TAG_NAME, "h1").text == STORE
        shot = tmp_path / "store-page.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        for name, series in history["series"].items():
            chart = browser.find_element(By.ID, f"chart-{name}")
            points = len(series["points"])
            assert points >= 1 and chart.get_attribute("data-points") == str(points)
            assert len(chart.find_elements(By.CSS_SELECTOR, ".pt")) == points, name
            assert chart.size["width"] >= 440  # two charts a row at most on a laptop screen
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
    finally:
        browser.quit()


def test_log_replay_from_a_checkpoint_agrees_with_spark(spark, tmp_path: Path):
    """A Delta table past its first checkpoint (version 10), with an OPTIMIZE removing files: the
    replay that starts from the checkpoint and the one from version 0 both hold Spark's live files."""
    from deltastate.changelog.log_replay import TableLog

    path = str(tmp_path / "table")
    for i in range(12):
        spark.range(i * 10, i * 10 + 7).write.format("delta").mode("append").save(path)
    spark.sql(f"OPTIMIZE delta.`{path}`")
    spark.range(500, 520).write.format("delta").mode("append").save(path)
    assert (tmp_path / "table" / "_delta_log" / f"{10:020d}.checkpoint.parquet").is_file()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    rows = spark.read.format("delta").load(path).count()
    time.sleep(0.01)
    full = TableLog().replay(tmp_path / "table", since_ms=0)
    from_checkpoint = TableLog().replay(tmp_path / "table", since_ms=int(time.time() * 1000))
    assert full[0][0].version == 0 and from_checkpoint[0][0].version == 11  # the first commit replayed
    for commits, live in (full, from_checkpoint):
        last = commits[-1]
        assert last.version == 13 and last.files == len(live) == detail["numFiles"]
        assert last.bytes == detail["sizeInBytes"] and last.rows == rows == 12 * 7 + 20
