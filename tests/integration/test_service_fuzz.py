"""Fuzzing the service's OpenAPI contract with schemathesis: whatever a client sends within (or just
outside) the published schema, the service answers without a 5xx. The app serves a real snapshot
file holding a key-value, a window and a session store, so generated requests reach real reads."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from support.local_infra import make_home

from deltastate.config import PROJECT_ROOT, load_settings
from deltastate.service import ServiceOptions, create_app
from deltastate.snapshot.generated import GeneratedStore, player_stats_sql, publish_generated
from deltastate.snapshot.publish import quote
from deltastate.stores import load_store

pytestmark = [pytest.mark.timeout(300)]


# The schema is loaded when the module is imported (schemathesis parametrizes at collection), so the
# app is built then, on a home of its own; the snapshot it serves is written before the first case.
HOME = make_home(Path(tempfile.mkdtemp(prefix="deltastate-fuzz-")))
CFG = load_settings({"DELTASTATE_HOME": str(HOME), "DELTASTATE_SCHEMAS": str(PROJECT_ROOT / "schemas")})
APP = create_app(CFG, ServiceOptions(sql_timeout_s=2.0, sql_max_rows=1000))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def served_snapshot() -> Iterator[None]:
    stats, trades, sessions = (load_store(CFG, n) for n in ("player_stats", "trade_stats", "user_sessions"))
    windows = ("INSERT INTO {t} SELECT 'SYM' || (i % 5), 1767225600000 + i * 1000, 1767225605000 + i * 1000, "
               "1 + i % 7, 10.5 * i, 1.0, 99.0, 10.5, i, 0, i, 0, TIMESTAMP '2026-01-01', TIMESTAMP '2026-01-01' "
               "FROM range(200) t(i)")
    clicks = ("INSERT INTO {t} SELECT 'user-' || (i % 9), 1767225600000 + i * 7200000, 1767225600000 + i * 7200000 + 60000, "
              "1767225600000 + i * 7200000, 1767225600000 + i * 7200000 + 60000, 3, '/home', 0, i, 0, "
              "TIMESTAMP '2026-01-01', TIMESTAMP '2026-01-01' FROM range(90) t(i)")
    publish_generated(CFG, [
        GeneratedStore(stats, lambda con: con.execute(f"INSERT INTO {quote('player_stats')} {player_stats_sql(500)}")),
        GeneratedStore(trades, lambda con: con.execute(windows.format(t=quote("trade_stats")))),
        GeneratedStore(sessions, lambda con: con.execute(clicks.format(t=quote("user_sessions")))),
    ])
    yield
    APP.state.service.close()
    shutil.rmtree(HOME, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case) -> None:
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path} {case.query} -> " \
                                       f"{response.status_code} {response.text[:500]}"
