"""A key-value store's audit rows from running totals (engine/keyvalue/audit.py), against per-batch counts
computed directly from a random stream split into micro-batches."""

from __future__ import annotations

import random

import pytest

from deltastate.engine.common.output import COUNTS
from deltastate.engine.keyvalue.audit import Ledger, RunningTotals, advance, batch_audit
from deltastate.errors import AuditMismatchError


def _stream(seed: int, n: int, partitions: int) -> list[tuple[int, int, str]]:
    """(partition, offset, kind) with kind in applied / tombstone / dead, offsets per partition from 0."""
    rng = random.Random(seed)
    next_offset = dict.fromkeys(range(partitions), 0)
    out = []
    for _ in range(n):
        p = rng.randrange(partitions)
        out.append((p, next_offset[p], rng.choices(["applied", "tombstone", "dead"], [0.85, 0.1, 0.05])[0]))
        next_offset[p] += 1
    return out


def _direct(batch: list[tuple[int, int, str]]) -> dict[int, tuple[int, int, int, int]]:
    counts: dict[int, list[int]] = {}
    for p, _, kind in batch:
        c = counts.setdefault(p, [0, 0, 0, 0])
        c[0] += 1
        c[1] += kind != "dead"
        c[2] += kind == "dead"
        c[3] += kind == "tombstone"
    return {p: tuple(c) for p, c in counts.items()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batch_rows_are_the_per_batch_counts(seed: int) -> None:
    stream = _stream(seed, 3_000, partitions=4)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), 9))
    batches = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    ledger, seen = Ledger(next_batch=0), []
    for batch_id, batch in enumerate(batches):
        seen.extend(batch)
        # What the state's audit groups hold after the batch: totals since the lineage began, emitted
        # for the partitions the batch touched (update mode).
        running = {}
        for p in {p for p, _, _ in batch}:
            mine = [r for r in seen if r[0] == p]
            times = [o for _, o, k in mine if k == "applied"]
            running[p] = RunningTotals(_direct(mine)[p], min(o for _, o, _ in mine), max(o for _, o, _ in mine),
                                       max(times) if times else None)
        audit = batch_audit(ledger, running, "s", batch_id)
        assert audit.counts == _direct(batch)
        for p in audit.counts:
            offsets = [o for q, o, _ in batch if q == p]
            assert audit.offsets[p] == (min(offsets), max(offsets))
        for name in COUNTS:
            assert audit.total(name) == sum(c[COUNTS.index(name)] for c in _direct(batch).values())
        assert audit.with_dead_letters() == {p: audit.offsets[p] for p, c in _direct(batch).items() if c[2]}
        ledger = advance(ledger, audit, batch_id)
        assert ledger.next_batch == batch_id + 1
    assert sum(c[0] for c in ledger.counts.values()) == len(stream)


def test_totals_behind_the_audit_table_are_refused() -> None:
    ledger = Ledger(next_batch=3, counts={0: (10, 9, 1, 0)}, hi={0: 9})
    with pytest.raises(AuditMismatchError, match=r"store 's', batch 3, partition 0"):
        batch_audit(ledger, {0: RunningTotals((8, 7, 1, 0), 0, 7, None)}, "s", 3)
    with pytest.raises(AuditMismatchError, match="partition 0"):  # in != applied + dead
        batch_audit(ledger, {0: RunningTotals((12, 10, 1, 0), 0, 11, None)}, "s", 3)
