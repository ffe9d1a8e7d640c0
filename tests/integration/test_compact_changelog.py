"""Compaction of a real player_stats changelog built by real runs (real broker, Spark, Delta, DuckDB):
the state before == after == the independent reference; records and files drop; tombstones older
than delete_retention go, newer ones stay; the active segment is untouched; a second pass is gated
by the dirty ratio. The intake audit table is bin-packed with its rows unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.reference import expected
from support.store_checks import (
    KV,
    STORE,
    assert_changelog_unique,
    assert_state,
    event,
    generated,
    new_topic,
    produce,
    published_state,
    table,
)

from deltastate.changelog import layout
from deltastate.changelog.reader import latest_state
from deltastate.cli.main import cli
from deltastate.engine import run_store
from deltastate.engine.common.lineage import load_or_create
from deltastate.engine.keyvalue.audit import load_ledger, scan_ledger
from deltastate.maintenance import compact_store
from deltastate.maintenance.stats import now_ms
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
DAY_MS = 24 * 3600 * 1000  # player_stats' delete_retention


def _files(spark, settings, name: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, settings.table_path(STORE, name)).detail().first()["numFiles"])


def _state(spark, settings) -> dict[str, tuple]:
    store = load_store(settings, STORE)
    rows = latest_state(spark, settings, store).collect()
    return {r["key"]: tuple(r[c] for c in (*store.value_columns, "epoch", "batch_id", "source_offset")) for r in rows}


def test_compaction_keeps_state_drops_superseded_and_old_tombstones(broker: str, spark, make_settings, topic: str,
                                                                     monkeypatch) -> None:
    # Two micro-batches (two files) per segment: several sealed segments, each of several files, and
    # one active.
    monkeypatch.setattr(layout, "BATCHES_PER_SEGMENT", 2)
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    early = [f"early-{i}" for i in range(12)]  # deleted in round 1: past retention at compaction
    late = [f"late-{i}" for i in range(12)]  # deleted in round 3: within retention
    rounds: list[list[KV]] = [
        generated(1_500, 200, seed=31, tombstones=0.02)
        + [(k.encode(), event(k, 5, 5)) for k in early + late] + [(k.encode(), None) for k in early],
        generated(1_500, 200, seed=32, tombstones=0.02),
        generated(1_500, 200, seed=33, tombstones=0.02) + [(k.encode(), None) for k in late],
        generated(800, 200, seed=34, tombstones=0.02),
    ]
    # Run 1 applies round 1 in one micro-batch; run 2 applies rounds 2-4 in six bounded ones.
    produce(settings, topic, rounds[0], ref)
    run_store(settings, STORE, once=True, topic=topic)
    cut = now_ms() + 1  # after round 1's tombstones were written, before any later one
    for records in rounds[1:]:
        produce(settings, topic, records, ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=700)
    exp = expected(ref.records, settings.max_value_bytes)

    changelog = table(spark, settings, "changelog")
    rows = changelog.select("key", "op", "epoch", "batch_id", "segment").collect()
    segments = sorted({r["segment"] for r in rows})
    assert len(segments) >= 3, segments
    newest = segments[-1]
    # What compaction must leave, computed here in Python from the rows: in sealed segments a key's
    # latest record only, minus tombstones written before `cut`; the active segment as it is.
    latest: dict[str, tuple] = {}
    for r in rows:
        if r["key"] not in latest or (r["epoch"], r["batch_id"]) > latest[r["key"]][:2]:
            latest[r["key"]] = (r["epoch"], r["batch_id"], r["op"], r["segment"])
    in_active = {r["key"] for r in rows if r["segment"] == newest}
    early_dead = {k for k, v in latest.items() if v[2] == "delete" and v[3] == segments[0] and k not in in_active}
    assert set(early) <= early_dead
    expected_rows = (sum(1 for r in rows if r["segment"] == newest)
                     + sum(1 for k, v in latest.items() if v[3] != newest and k not in early_dead))
    before_state = _state(spark, settings)
    intake_rows = sorted(tuple(r) for r in table(spark, settings, "intake").drop("write_time").collect())
    intake_files = _files(spark, settings, "intake")
    assert intake_files >= 2  # one copy of the audits per run

    report = compact_store(settings, STORE, spark=spark, now_ms=cut + DAY_MS)

    # The audit table is bin-packed, its rows untouched, and a run still starts from its newest row.
    assert report.side_files_optimized == {"intake": intake_files, "deadletter": 0}
    assert _files(spark, settings, "intake") == 1
    assert sorted(tuple(r) for r in table(spark, settings, "intake").drop("write_time").collect()) == intake_rows
    store, lineage = load_store(settings, STORE), load_or_create(spark, settings, load_store(settings, STORE))
    next_batch = max(r[1] for r in intake_rows) + 1
    fast, scanned = (f(spark, settings, store, lineage, next_batch) for f in (load_ledger, scan_ledger))
    assert (fast.counts, fast.hi) == (scanned.counts, scanned.hi) and fast.counts

    assert report.skipped is None, report
    assert report.before.records == len(rows) and report.after.records == expected_rows < len(rows)
    assert report.after.files < report.before.files
    assert report.tombstones_dropped == len(early_dead)
    assert report.records_dropped == len(rows) - expected_rows
    assert report.dirty_ratio_before >= 0.5 and report.dirty_ratio_after < report.dirty_ratio_before
    after = table(spark, settings, "changelog")
    kept = after.select("key", "op", "segment").collect()
    assert len(kept) == expected_rows
    assert not {r["key"] for r in kept} & early_dead
    assert {r["key"] for r in kept if r["op"] == "delete"} >= set(late)  # within retention: kept
    assert sum(1 for r in kept if r["segment"] == newest) == sum(1 for r in rows if r["segment"] == newest)
    assert _state(spark, settings) == before_state
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)
    # The rewrite is one overwrite of the sealed segments, and not a data change for streaming readers.
    log = Path(settings.table_path(STORE, "changelog")) / "_delta_log"
    commits = [[json.loads(line) for line in f.read_text().splitlines()] for f in sorted(log.glob("*.json"))]
    rewrite = [c for c in commits if any("commitInfo" in a and str(a["commitInfo"].get("userMetadata", ""))
                                         .startswith("deltastate compact") for a in c)]
    assert len(rewrite) == 1
    info = next(a["commitInfo"] for a in rewrite[0] if "commitInfo" in a)
    assert info["operationParameters"]["mode"] == "Overwrite"
    assert info["operationParameters"]["predicate"] == f"`segment` IN ({', '.join(str(s) for s in segments[:-1])})"
    files = [a.get("add") or a.get("remove") for a in rewrite[0] if "add" in a or "remove" in a]
    assert files and all(f["dataChange"] is False for f in files)

    # Nothing dirty is left in sealed segments: the next pass, through the CLI, is gated by the dirty ratio.
    out = CliRunner().invoke(cli, ["compact", STORE, "--json", "--no-vacuum"], obj=settings)
    assert out.exit_code == 0, out.output
    again = json.loads(out.output.strip().splitlines()[-1])
    assert again["skipped"].startswith("dirty ratio") and again["after"]["records"] == expected_rows

