"""Delta commit benchmark: what one small append costs, with and without Delta's idempotent-write
options (txnAppId, txnVersion). A micro-batch of a store is one changelog commit, idempotent for a
run's first batch and plain after it (docs/architecture.md), so this is the floor of a batch's cost
on the committed path that deltastate's own work sits on."""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass

from deltastate.config import Settings


@dataclass(frozen=True)
class CommitFigures:
    appends: int
    seconds: dict[str, list[float]]  # variant -> seconds per append, past the first five

    def lines(self) -> list[str]:
        out = [f"bench commit: a 1-row Delta append, {self.appends} in a row per variant (the first 5 not counted)"]
        for name, values in self.seconds.items():
            ordered = sorted(values)
            out.append(f"  {name:<28} median {statistics.median(values):.3f} s  "
                       f"p90 {ordered[int(0.9 * (len(ordered) - 1))]:.3f} s")
        return out


def run_commit_bench(settings: Settings, appends: int = 25) -> CommitFigures:
    from deltastate.infra.spark import get_spark

    spark = get_spark(settings)
    row = spark.createDataFrame([(1, "x")], "a bigint, b string")
    seconds: dict[str, list[float]] = {}
    for name, idempotent in (("warm-up", True), ("idempotent (txnAppId)", True), ("plain append", False)):
        path = f"{tempfile.mkdtemp(prefix='deltastate-commit-')}/table"
        times = []
        for i in range(appends):
            writer = row.write.format("delta").mode("append")
            if idempotent:
                writer = writer.option("txnAppId", "bench").option("txnVersion", i)
            started = time.perf_counter()
            writer.save(path)
            times.append(time.perf_counter() - started)
        if name != "warm-up":
            seconds[name] = times[5:]
    return CommitFigures(appends, seconds)
