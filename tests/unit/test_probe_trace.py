"""probe_trace: a probe's produce -> visible time split at the batch whose audit offsets cover it."""

from __future__ import annotations

import json

import pytest

from deltastate.bench.probe_trace import BatchTiming, ProbeTiming, break_down, slowest


def _batch(batch_id: int, started: float, committed: float, offsets: dict[int, tuple[int, int]]) -> BatchTiming:
    return BatchTiming(batch_id, started, committed, offsets)


BATCHES = [_batch(7, 10.0, 10.8, {0: (0, 99), 1: (0, 40)}), _batch(8, 10.9, 11.5, {0: (100, 180), 1: (41, 90)})]


def test_the_batch_that_covers_the_offset_splits_the_time() -> None:
    probe = ProbeTiming(partition=1, offset=41, produced_at=10.5, visible_at=11.75)
    parts = break_down(probe, BATCHES)
    assert parts is not None and parts.batch_id == 8
    assert (parts.wait, parts.batch, parts.read) == pytest.approx((0.4, 0.6, 0.25))
    assert parts.wait + parts.batch + parts.read == pytest.approx(parts.total)


def test_a_probe_no_batch_covers_is_left_out() -> None:
    assert break_down(ProbeTiming(2, 5, 1.0, 2.0), BATCHES) is None
    assert break_down(ProbeTiming(0, 181, 1.0, 2.0), BATCHES) is None


def test_slowest_first() -> None:
    probes = [ProbeTiming(0, 5, 9.9, 11.0), ProbeTiming(0, 150, 10.2, 13.0), ProbeTiming(1, 50, 10.8, 11.6),
              ProbeTiming(3, 1, 0.0, 99.0)]
    assert [round(b.total, 3) for b in slowest(probes, BATCHES, n=2)] == [2.8, 1.1]


def test_from_a_batch_report() -> None:
    timing = BatchTiming.of(4, 20.0, {"read": 0.2, "state_and_commit": 0.9, "live": 0.1},
                            json.dumps({"0": [3, 9], "2": [0, 0]}), after_commit=0.1)
    assert timing.started_at == pytest.approx(18.8) and timing.committed_at == pytest.approx(19.9)
    assert timing.offsets == {0: (3, 9), 2: (0, 0)}
    assert BatchTiming.of(5, 1.0, {}, None).offsets == {}
