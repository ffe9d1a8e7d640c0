"""`deltastate bench migrate` through the real broker, Spark, Delta and REST service, at a small size:
both builds run (replay with the topic intact, seed after it was truncated) and every read succeeds."""

from __future__ import annotations

import pytest
from support.local_infra import free_port

from deltastate.bench.migrate import run_migrate_bench

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def test_bench_migrate_builds_by_replay_and_by_seed(broker, spark, make_settings):
    settings = make_settings()
    figures = run_migrate_bench(settings, keys=1_000, readers=2, port=free_port(), baseline_s=1.0)
    assert set(figures.builds) == {"replay", "seed"} and all(s > 0 for s in figures.builds.values())
    assert [r.label for r in figures.reads] == ["no migration", "during a replay build", "during a seed build"]
    assert all(r.requests > 0 and r.errors == 0 for r in figures.reads), figures.lines()
    for kind, seconds in figures.builds.items():  # start's phases account for its time
        assert set(figures.phases[kind]) == {"plan", "seed", "run"}
        assert sum(figures.phases[kind].values()) == pytest.approx(seconds, abs=0.5)
    print("\n".join(figures.lines()))
