"""`deltastate bench memory` runs a real store under its memory budget and reports what it holds."""

from __future__ import annotations

import pytest

from deltastate.bench.memory import run_memory_bench

pytestmark = pytest.mark.integration


def test_bench_memory_runs_a_store_under_its_budget(broker, spark, make_settings):
    settings = make_settings()
    lines: list[str] = []
    figures = run_memory_bench(settings, keys=3_000, budget_mb=64, echo=lines.append)
    assert figures.query_budget_mb == "64"  # applied to the store's own query
    # One event per key: every key is state (plus one audit group per source partition).
    assert 3_000 <= figures.state_rows <= 3_000 + 4 + 1
    assert 0 < figures.heap_committed_mb <= figures.heap_max_mb
    assert figures.rss_mb <= figures.peak_rss_mb and figures.rss_mb > 0
    printed = "\n".join(figures.lines())
    assert "3,000 keys" in printed and "state.max_memory 64 MB" in printed and "peak RSS" in printed
