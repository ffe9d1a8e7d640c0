"""The plugin's store page without a snapshot yet (the live test checks it after a real publish):
every declared store is listed, the changelog's newest version is read from a real _delta_log
folder layout, and Airflow sees the plugin's app, nav view and operator link."""

from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient
from support.local_infra import make_home

from deltastate.changelog.deltalog import newest_version
from deltastate.config import load_settings
from deltastate.stores import list_stores


def test_store_page_lists_every_store_and_changelog_versions(tmp_path):
    home = make_home(tmp_path / "home")
    settings = dataclasses.replace(load_settings({}), home=home, storage_root=str(home / "data"))
    log = home / "data" / "stores" / "player_stats" / "changelog" / "_delta_log"
    log.mkdir(parents=True)
    for version in (0, 1, 7):
        (log / f"{version:020d}.json").write_text("{}\n")
    (log / f"{7:020d}.checkpoint.parquet").write_text("")  # not a commit file
    assert newest_version(str(log.parent)) == 7

    from deltastate.orchestration.webapp import create_app

    client = TestClient(create_app(settings))
    rows = {r["store"]: r for r in client.get("/api/stores").json()}
    assert set(rows) == set(list_stores(settings))
    assert rows["player_stats"]["changelog_version"] == 7 and rows["player_stats"]["snapshot_version"] is None
    assert rows["player_stats"]["versions_behind"] == 8  # versions 0..7, none in a snapshot
    page = client.get("/stores").text
    assert all(f"<tr id='{s}'>" in page for s in rows) and "no Data Docs yet" in page


def test_plugin_registers_app_view_and_operator_link():
    from deltastate.orchestration.operators import StorePageLink
    from deltastate.orchestration.plugin import DeltastatePlugin

    [app] = DeltastatePlugin.fastapi_apps
    assert app["url_prefix"] == "/deltastate"
    [view] = DeltastatePlugin.external_views
    assert view["href"] == "deltastate/stores" and view["destination"] == "nav"
    assert any(isinstance(link, StorePageLink) for link in DeltastatePlugin.operator_extra_links)


def test_restore_refuses_without_confirmation():
    from deltastate.orchestration.checks import NotConfirmedError, require_confirm

    for confirm in (False, "False", None, ""):
        with pytest.raises(NotConfirmedError, match="store 'player_stats': restore not confirmed"):
            require_confirm("player_stats", confirm)
    assert require_confirm("player_stats", True) == require_confirm("player_stats", "True") == "player_stats"


def test_history_refuses_bad_hours_and_unknown_stores_in_a_sentence(tmp_path):
    from fastapi.testclient import TestClient

    from deltastate.orchestration.webapp import MAX_HOURS, create_app, parse_hours

    assert parse_hours(None) == 6 and parse_hours("0.5") == 0.5 and parse_hours(str(MAX_HOURS)) == MAX_HOURS
    for bad in ("abc", "0", "-1", "nan", "inf", str(MAX_HOURS + 1), ""):
        with pytest.raises(ValueError, match=f"^hours must be a number above 0 and at most {MAX_HOURS}, got {bad!r}$"):
            parse_hours(bad)
    home = make_home(tmp_path / "home")
    settings = dataclasses.replace(load_settings({}), home=home, storage_root=str(home / "data"))
    client = TestClient(create_app(settings))
    answer = client.get("/api/stores/player_stats/history", params={"hours": "x"})
    assert answer.status_code == 400 and answer.json()["detail"].startswith("hours must be a number")
    answer = client.get("/api/stores/nope/history")
    assert answer.status_code == 404
    assert answer.json()["detail"] == f"unknown store 'nope'; declared stores: {', '.join(list_stores(settings))}"


def test_chart_draws_one_marker_per_point_inside_its_plot():
    import re

    from deltastate.orchestration.charts import (
        HEIGHT,
        LEFT,
        RIGHT,
        WIDTH,
        axis_top,
        format_value,
        nice_ceiling,
        svg_chart,
    )

    assert [nice_ceiling(v) for v in (0, 0.3, 1, 7, 11, 240, 260, 999)] == [1, 0.5, 1, 10, 20, 250, 500, 1000]
    assert format_value(1536, "bytes") == "1.5 KiB" and format_value(0.25, "s") == "250 ms"
    assert format_value(1500, "s") == "25 min" and format_value(36_000, "s") == "10 h"
    assert axis_top(2000, "s") == 50 * 60 and axis_top(10_000, "s") == 5 * 3600 and axis_top(2000, "rows") == 2000
    assert axis_top(105, "s") == 120 and axis_top(90, "s") == 100  # 200 s would read "3.33 min"
    assert [format_value(v, "s", like=120) for v in (0, 60, 120)] == ["0 min", "1 min", "2 min"]
    assert format_value(51_200, "bytes", like=102_400) == "50 KiB" and format_value(0, "bytes", like=102_400) == "0 KiB"
    assert format_value(12_500, "records") == "12.5k"
    points = [[1_000_000 + i * 60_000, v] for i, v in enumerate((3, 0, 9, 4))]
    svg = svg_chart("lag", "Consumer lag", "records", points, 1_000_000, 1_000_000 + 3 * 60_000)
    circles = [(float(x), float(y)) for x, y in re.findall(r"<circle class='pt' cx='([\d.]+)' cy='([\d.]+)'", svg)]
    assert len(circles) == 4 and "data-points='4'" in svg
    assert circles[0][0] == LEFT and circles[-1][0] == WIDTH - RIGHT  # the window's ends
    assert min(y for _, y in circles) == circles[2][1] and all(0 <= y <= HEIGHT for _, y in circles)  # 9 is highest
    bars = svg_chart("dead_letters", "Dead letters", "records", points, 1_000_000, 1_000_000 + 3 * 60_000, bars=True)
    assert bars.count("<rect class='pt'") == 4 and "<polyline" not in bars


def test_history_uses_the_engine_checkpoint_names():
    from deltastate.changelog.history import CHECKPOINT_LINEAGE_FILE, CHECKPOINT_QUERY
    from deltastate.engine.common.lineage import LINEAGE_FILE
    from deltastate.engine.common.source import QUERY

    assert (CHECKPOINT_LINEAGE_FILE, CHECKPOINT_QUERY) == (LINEAGE_FILE, QUERY)
