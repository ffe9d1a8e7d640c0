"""Where a freshness probe's time went: waiting for a micro-batch, inside it, and reading after it.

A probe is one record produced to a known (partition, offset); the batch that carried it is the one
whose audit offsets cover that offset. Its produce -> visible time then splits into three parts:

- wait: from the produce to the start of the batch that read it (the batch before it still
  running, then the trigger);
- batch: that batch's writer, from its start to its changelog commit;
- read: from the commit to the first read that answered with the probe (the service seeing the
  commit, plus the poll interval). It can be slightly negative: the commit's file is in the log,
  and the service's follower may merge it, before Delta's commit call returns to the writer (its
  post-commit work: the checksum, the new snapshot).

A tail in `wait` or `batch` is the stream's; a tail in `read` is the query service's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeTiming:
    """One probe, on the monotonic clock of the process that produced and read it."""

    partition: int
    offset: int
    produced_at: float
    visible_at: float


@dataclass(frozen=True)
class BatchTiming:
    """One micro-batch: when its writer started and when its changelog commit ended (monotonic),
    and the offsets it covered ({partition: [lo, hi]}, the audit row's offsets)."""

    batch_id: int
    started_at: float
    committed_at: float
    offsets: dict[int, tuple[int, int]]

    @classmethod
    def of(cls, batch_id: int, ended_at: float, phases: dict[str, float], offsets_json: str | None,
           after_commit: float = 0.0) -> BatchTiming:
        """From a batch report received at ended_at: its writer ran sum(phases) seconds, the last
        after_commit of them after the changelog commit."""
        raw = json.loads(offsets_json) if offsets_json else {}
        offsets = {int(p): (int(lo), int(hi)) for p, (lo, hi) in raw.items()}
        return cls(batch_id, ended_at - sum(phases.values()), ended_at - after_commit, offsets)


@dataclass(frozen=True)
class ProbeBreakdown:
    total: float
    wait: float
    batch: float
    read: float
    batch_id: int

    def describe(self) -> str:
        return (f"{self.total:.3f} s = wait {self.wait:.3f} + batch {self.batch:.3f} (batch id {self.batch_id}) "
                f"+ read {self.read:.3f}")


def break_down(probe: ProbeTiming, batches: list[BatchTiming]) -> ProbeBreakdown | None:
    """The probe's three parts, or None when no batch reported covering its offset."""
    for b in batches:
        lo_hi = b.offsets.get(probe.partition)
        if lo_hi is not None and lo_hi[0] <= probe.offset <= lo_hi[1]:
            return ProbeBreakdown(probe.visible_at - probe.produced_at, b.started_at - probe.produced_at,
                                  b.committed_at - b.started_at, probe.visible_at - b.committed_at, b.batch_id)
    return None


def slowest(probes: list[ProbeTiming], batches: list[BatchTiming], n: int = 3) -> list[ProbeBreakdown]:
    """The n slowest probes that a batch report covers, slowest first."""
    found = [b for b in (break_down(p, batches) for p in probes) if b is not None]
    return sorted(found, key=lambda b: b.total, reverse=True)[:n]


__all__ = ["BatchTiming", "ProbeBreakdown", "ProbeTiming", "break_down", "slowest"]
