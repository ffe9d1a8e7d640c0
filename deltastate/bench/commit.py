"""Delta commit benchmark: what one small append costs, plain and idempotent, with Delta's writer
options (txnAppId, txnVersion: the table's state rebuilt to find the app id's version) and with
deltastate's append_once (changelog/tables.py: the version read from the snapshot's checksum). A
micro-batch of a store is one changelog commit, idempotent for a run's first batch and plain after
it (docs/architecture.md), so this is the floor of a batch's cost on the committed path that
deltastate's own work sits on.

`log_files`: plain appends to tables whose `_delta_log` folder also holds that many more files, as a
long-running store's log holds them (four per commit on a local disk: the commit, Delta's checksum,
Hadoop's checksum of each). Delta lists the folder whole whenever it brings its snapshot up to date,
so every one is paid on every commit; the extra files are empty and named to sort before every
commit file, so Delta lists them and reads none (changelog/log_cleanup.py keeps a store's log to its
retention: at one commit a second and the default hour, about 14,800 files).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

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


def run_commit_bench(settings: Settings, appends: int = 25, log_files: tuple[int, ...] = ()) -> CommitFigures:
    from deltastate.changelog.tables import append_once
    from deltastate.infra.spark import get_spark

    spark = get_spark(settings)
    row = spark.createDataFrame([(1, "x")], "a bigint, b string")

    def writer_option(path: str, i: int) -> None:
        row.write.format("delta").mode("append").option("txnAppId", "bench").option("txnVersion", i).save(path)

    def plain(path: str, i: int) -> None:
        row.write.format("delta").mode("append").save(path)

    seconds: dict[str, list[float]] = {}
    variants = (("warm-up", writer_option), ("idempotent (txnAppId)", writer_option),
                ("idempotent (append_once)", lambda path, i: append_once(row, path, "bench", i)),
                ("plain append", plain))
    for name, append in variants:
        path = f"{tempfile.mkdtemp(prefix='deltastate-commit-')}/table"
        plain(path, -1)  # the table: append_once appends to one that exists
        times = []
        for i in range(appends):
            started = time.perf_counter()
            append(path, i)
            times.append(time.perf_counter() - started)
        if name != "warm-up":
            seconds[name] = times[5:]
    for count in log_files:
        path = f"{tempfile.mkdtemp(prefix='deltastate-commit-')}/table"
        row.write.format("delta").mode("append").save(path)
        _fill_log(Path(path) / "_delta_log", count)
        times = []
        for _ in range(appends):
            started = time.perf_counter()
            row.write.format("delta").mode("append").save(path)
            times.append(time.perf_counter() - started)
        seconds[f"plain, log +{count:,} files"] = times[5:]
    return CommitFigures(appends, seconds)


def _fill_log(log: Path, count: int) -> None:
    for i in range(count):  # "-" sorts before "0": listed with the commits, never read as one
        (log / f"-filler-{i:09d}").touch()
