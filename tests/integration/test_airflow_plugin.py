"""The plugin's store page without a snapshot yet (the live test checks it after a real publish):
every declared store is listed, the changelog's newest version is read from a real _delta_log
folder layout, and Airflow sees the plugin's app, nav view and operator link."""

from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient
from support.local_infra import make_home

from deltastate.config import load_settings
from deltastate.orchestration.status import latest_delta_version
from deltastate.stores import list_stores


def test_store_page_lists_every_store_and_changelog_versions(tmp_path):
    home = make_home(tmp_path / "home")
    settings = dataclasses.replace(load_settings({}), home=home, storage_root=str(home / "data"))
    log = home / "data" / "stores" / "player_stats" / "changelog" / "_delta_log"
    log.mkdir(parents=True)
    for version in (0, 1, 7):
        (log / f"{version:020d}.json").write_text("{}\n")
    (log / f"{7:020d}.checkpoint.parquet").write_text("")  # not a commit file
    assert latest_delta_version(str(log.parent)) == 7

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
