"""`deltastate bench freshness` and `bench commit` run the real parts and report coherent figures:
every probe becomes visible through the REST service, at both consistencies, and the batch
breakdown and Spark's durations are filled from the run; the floor (`--floor`) counts only the
batches after its warm-up, and the store plan's Delta floor lands every record."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from deltastate.bench.commit import run_commit_bench
from deltastate.bench.floor import run_floor, run_floor_apart
from deltastate.bench.freshness import run_freshness_bench

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


# The suite measures committed freshness; `pytest -m soak` adds the latest reads' probe.
@pytest.mark.parametrize("consistency", ["committed", pytest.param("latest", marks=pytest.mark.soak)])
def test_bench_freshness_sees_every_probe(broker, spark, make_settings, consistency):
    settings = make_settings()
    figures = run_freshness_bench(settings, "player_stats", rate=200, probes=3, trigger="1s",
                                  consistency=consistency, port=18767, idle_seconds=0, echo=lambda _: None,
                                  warmup_seconds=0)
    assert figures.missed == 0 and len(figures.visible_s) == 3
    assert all(0 < s < 30 for s in figures.visible_s)
    assert figures.batch_s and set(figures.phases) == {"state", "commit"}
    assert 0 < figures.processed <= figures.produced
    printed = "\n".join(figures.lines())
    assert f"consistency={consistency}" in printed and "produce -> visible" in printed and "writer.commit" in printed
    # The batches before the first probe (at least the first) are the warm-up's, not counted.
    assert figures.warmup_batches >= 1 and "warm-up:" in printed
    assert len(figures.batch_s) <= len([p for p in figures.spark.get("triggerExecution", [])])


def test_bench_commit_times_every_kind_of_append(spark, make_settings):
    figures = run_commit_bench(make_settings(), appends=10)
    assert set(figures.seconds) == {"idempotent (txnAppId)", "idempotent (append_once)", "plain append"}
    assert all(len(v) == 5 and min(v) > 0 for v in figures.seconds.values())


def test_bench_floor_counts_the_batches_after_its_warm_up(broker, spark, make_settings):
    figures = run_floor(make_settings(), rate=200, seconds=6, trigger="1s", warmup_seconds=6)
    assert figures.store == "floor: count per key" and figures.warmup_batches >= 1 and figures.produced > 0
    # One trigger a second: at most one batch per second of the measured six (and a last one).
    # Counted: the batch in flight when the warm-up ends, one per trigger of the 6 measured seconds,
    # and the batches that read what the load sent while it stopped; the 20 s warm-up's are not.
    assert 1 <= len(figures.batch_s) <= 6 + 4 and all(s > 0 for s in figures.batch_s)
    assert figures.processed == figures.produced
    assert "warm-up:" in "\n".join(figures.lines())


def _landed_floor(spark, settings, sink: str):
    """A Delta floor's figures and its table's rows, once every batch with records (the warm-up's
    too) is one plain append in the table's history."""
    figures = run_floor(settings, rate=200, seconds=6, trigger="1s", warmup_seconds=6, sink=sink)
    assert figures.store.endswith("appended to Delta") and figures.batch_s and figures.produced > 0
    [table] = (settings.home / "bench").glob("floor-*-table")
    commits = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("operation").collect()
    assert len(commits) >= figures.warmup_batches + len(figures.batch_s) and {c[0] for c in commits} == {"WRITE"}
    return figures, spark.read.format("delta").load(str(table))


def test_the_delta_floor_lands_each_batch_as_one_append_of_its_changed_keys(broker, spark, make_settings):
    """Spark and Delta's floor (`--floor --floor-sink delta`): every batch with records is one Delta
    commit, and the counts it appended account for every record the load produced."""
    figures, rows = _landed_floor(spark, make_settings(), "delta")
    # A key's count grows with each batch that saw it: its newest row counts all its records.
    newest = rows.groupBy("key").agg(F.max("count").alias("n"))
    assert newest.agg(F.sum("n")).first()[0] == figures.produced == figures.processed


def test_the_store_plans_delta_floor_appends_the_plans_rows_with_every_record_audited(broker, spark, make_settings):
    """The store plan's Delta floor (`--floor --floor-sink plan-delta`): player_stats' own query, each
    batch one plain append of the rows it changed. Its audit groups' running totals, newest per
    source partition, add up to every record the load produced; its key rows are the load's keys."""
    figures, rows = _landed_floor(spark, make_settings(), "plan-delta")
    audits = rows.where(F.col("audit_partition").isNotNull()).groupBy("audit_partition").agg(
        F.max("records_in").alias("n"), F.max("dead_lettered").alias("dead"))
    assert audits.agg(F.sum("n")).first()[0] == figures.produced == figures.processed
    assert not audits.agg(F.sum("dead")).first()[0]  # the load's records are all valid
    keys = {r[0] for r in rows.where(F.col("store_key").isNotNull()).select("store_key").distinct().collect()}
    assert keys and all(k.startswith("player-") for k in keys)


def test_the_floor_apart_runs_in_its_own_process_and_reports_its_batches(broker, make_settings):
    """`--against-floor` measures the floor in a new process (`python -m deltastate.bench.floor`) against the
    bench's broker: its figures come back whole."""
    # A new JVM: its first batch alone can take ten seconds on a busy machine.
    figures = run_floor_apart(make_settings(), rate=200, seconds=6, trigger="1s", warmup_seconds=20)
    assert figures.warmup_s == 20 and figures.produced > 0 and figures.store.startswith("floor")
    # Counted: the batch in flight when the warm-up ends, one per trigger of the 6 measured seconds,
    # and the batches that read what the load sent while it stopped; the 20 s warm-up's are not.
    assert 1 <= len(figures.batch_s) <= 6 + 4 and all(s > 0 for s in figures.batch_s)
    assert figures.processed == figures.produced
    assert figures.spark["triggerExecution"] == figures.batch_s
