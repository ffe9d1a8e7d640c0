"""fresh=true: the changelog records committed after a snapshot, as an overlay for Queries.at().

The snapshot records, per store, the changelog version it was built from. Every commit after that
version is read straight from its parquet files (deltalog.py finds them; pyarrow reads them; no
Spark), reduced to the latest record per store key by (epoch, batch_id, commit version), and handed
to Queries as rows with the snapshot table's columns plus `op`: a put replaces the snapshot's row of
that store key, a delete removes it. Commits that rewrite files (compaction) add files whose records
are each key's latest up to then, never older than what the snapshot holds, so they merge the same way.

Window and session stores also carry a retention horizon: per partition, the one of
changelog/rules.py at the snapshot's stream times (recorded with it) advanced by the intake audit
rows committed since. Entries it no longer retains, whether from the snapshot or the newer commits,
leave the answer, as they would at the next publish.

An overlay grows commit by commit: the newer commits' files are read into one table, and only the
keys they touch are ranked again together with the earlier overlay's rows of those keys; every other
row stands. The merged rows are still copied into a new table at each extension, so its cost grows
with the changes since the publish (the next publish starts a new, empty overlay).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from deltastate.changelog.deltalog import DeltaLog
from deltastate.changelog.intake import stream_times_after
from deltastate.changelog.layout import CHANGELOG, EPOCH, EVENT_TIME, OP, ORDER_COLUMNS, WRITE_TIME, store_key_columns
from deltastate.changelog.rules import latest_per_key_sql, retention_horizon
from deltastate.config import Settings
from deltastate.query.errors import FreshReadError, ParameterError
from deltastate.query.reader import Snapshot
from deltastate.snapshot.catalog import StoreSnapshot
from deltastate.snapshot.publish import quote
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa



@dataclass(frozen=True)
class Overlay:
    """What a fresh read merged: the rows, and the changelog version they bring the answer up to."""

    store: str
    rows: pa.Table | None  # None: nothing was committed after the snapshot
    from_version: int | None
    to_version: int | None
    # Window and session stores: source partition -> the retention horizon after the newer commits
    # (rules.retention_horizon, compared with rules.retained_column); entries at or below it, the
    # snapshot's included, have left the store as they do at publish.
    horizon: dict[int, int] | None = None
    # What the horizon was computed from: the stream times per partition and the intake version they
    # reach, which a later overlay advances by the newer intake commits alone.
    stream_times: dict[int, int] | None = field(default=None, repr=False, compare=False)
    intake_version: int | None = field(default=None, repr=False, compare=False)
    # The rows with their ordering columns (epoch, batch_id, the commit): what a later overlay of the
    # same snapshot extends with the commits after to_version instead of reading them all again.
    raw: pa.Table | None = field(default=None, repr=False, compare=False)


def snapshot_columns(snap: Snapshot, store: str) -> list[str]:
    cursor = snap.con.execute(f"SELECT * FROM {quote(store)} LIMIT 0")
    return [d[0] for d in cursor.description or []]


def build_overlay(settings: Settings, deltalog: DeltaLog, snap: Snapshot, store: StoreDefinition,
                  previous: Overlay | None = None) -> Overlay:
    """The changelog records of `store` committed after snapshot `snap` was built. previous: an
    earlier overlay of the same snapshot, extended with the commits after it (its rows are the latest
    per key up to its version, so only newer commits are read)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    refusal = backend_of(store).fresh_refusal(store)
    if refusal is not None:
        raise ParameterError("fresh", refusal)
    info = snap.store_info.get(store.name)
    held = None if info is None else info.changelog_version
    table_path = settings.table_path(store.storage, CHANGELOG)
    newest = deltalog.newest_commit(table_path)
    if newest is None or (held is not None and newest.version <= held):
        return Overlay(store.name, None, held, held)
    start, base = held, None
    if (previous is not None and previous.raw is not None and previous.from_version == held
            and previous.to_version is not None):
        if previous.to_version >= newest.version:  # as new as the log says, or newer (a cached look)
            return _with_newer_horizon(settings, deltalog, info, store, previous)
        start, base = previous.to_version, previous.raw
    files = deltalog.tail_files(table_path, start, newest.version)
    if not files and base is None:
        return Overlay(store.name, None, held, newest.version)
    columns = snapshot_columns(snap, store.name)
    wanted = list(dict.fromkeys([*columns, OP, *ORDER_COLUMNS]))
    try:
        parts = []
        for f in files:
            file = pq.ParquetFile(f.path)
            table = file.read(columns=[c for c in wanted if c in file.schema_arrow.names])
            parts.append(table.append_column("_commit", pa.array([f.version] * table.num_rows, pa.int64())))
        # One table of every newer commit's rows: a catch-up over hundreds of commits is one scan,
        # not a union whose planning grows with the number of files.
        commits = pa.concat_tables(parts, promote_options="permissive") if parts else None
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        raise FreshReadError(f"store {store.name!r}: reading changelog commits after version {start} "
                             f"failed: {exc}") from exc
    keys = [quote(c) for c in store_key_columns(store)]
    con = duckdb.connect(":memory:")  # our own instance: the snapshot's connection is locked down
    try:
        con.execute("SET TimeZone = 'UTC'")  # timestamps become naive UTC, like the snapshot's
        raw = con.sql(_merge_sql(con, wanted, keys, commits, base)).to_arrow_table()
    finally:
        con.close()
    extra = [c for c in ORDER_COLUMNS if c not in columns]
    rows = raw.drop_columns(["_commit", *extra])
    horizon = _horizon(settings, deltalog, info, store, None if base is None else previous)
    return Overlay(store.name, rows, held, newest.version, *horizon, raw=raw)


def _merge_sql(con: duckdb.DuckDBPyConnection, wanted: list[str], keys: list[str], commits: pa.Table | None, base: pa.Table | None) -> str:
    """The latest record per store key of the newer commits' rows and an earlier overlay's (`base`,
    already one row per key). Only the keys the newer commits touch are ranked again, with their
    base rows (a compaction's rewrite may hold an older record than base); every other base row
    stands as it is, so extending a large overlay by one commit costs that commit's keys, not the
    overlay's size."""
    has_epoch = EPOCH in wanted
    if commits is None:  # nothing newer to read: base as it is
        con.register("_base", base)
        return "SELECT * FROM _base"
    con.register("_commits", commits)
    newer = f"SELECT {', '.join(_column(c, commits.column_names) for c in wanted)}, _commit FROM _commits"
    if base is None:
        return latest_per_key_sql(f"({newer})", keys, has_epoch=has_epoch, tiebreak="_commit")
    con.register("_base", base)
    on = " AND ".join(f"b.{k} = t.{k}" for k in keys)
    touched = f"(SELECT DISTINCT {', '.join(keys)} FROM ({newer}))"
    ranked = latest_per_key_sql(f"({newer} UNION ALL BY NAME SELECT b.* FROM _base b SEMI JOIN {touched} t ON {on})",
                                keys, has_epoch=has_epoch, tiebreak="_commit")
    return f"{ranked} UNION ALL BY NAME SELECT b.* FROM _base b ANTI JOIN {touched} t ON {on}"


def _with_newer_horizon(settings: Settings, deltalog: DeltaLog, info: StoreSnapshot | None, store: StoreDefinition,
                        overlay: Overlay) -> Overlay:
    """overlay, with its horizon advanced by the intake commits after its own: a batch's audit reaches
    the intake table after its changelog commit, so an overlay built in between (by the service's
    follower, say) would otherwise keep an older horizon until the next changelog commit."""
    if overlay.stream_times is None:
        return overlay
    horizon, times, reached = _horizon(settings, deltalog, info, store, overlay)
    if reached == overlay.intake_version:
        return overlay
    return replace(overlay, horizon=horizon, stream_times=times, intake_version=reached)


def _horizon(settings: Settings, deltalog: DeltaLog, info: StoreSnapshot | None, store: StoreDefinition,
             previous: Overlay | None) -> tuple[dict[int, int] | None, dict[int, int] | None, int | None]:
    """Per source partition, the retention horizon at the snapshot's stream times advanced by the
    intake audit rows committed after the intake version it recorded (each row holds its batch's
    newest event time per partition), with those stream times and the intake version they reach.
    previous: an earlier overlay of the same snapshot, whose stream times are advanced by the intake
    commits after its own version alone. Only a batch that puts something advances stream time, so a
    changelog with no newer commits needs no new horizon; this is called only when it has some."""
    spec = store.window or store.session
    if spec is None:
        return None, None, None
    if info is not None and info.intake_version is None and info.changelog_version is not None:
        # Published before snapshots recorded their stream times: reading the intake from its first
        # commit could outlive the Delta log's retention, so these keep their own horizon until the
        # next publish.
        return None, None, None
    if previous is not None and previous.stream_times is not None:
        times, after = previous.stream_times, previous.intake_version
    else:
        times = {} if info is None else info.stream_times_by_partition()
        after = None if info is None else info.intake_version
    times, reached = stream_times_after(settings, deltalog, store, after, times)
    return {p: retention_horizon(spec, ms) for p, ms in times.items()}, times, reached


def _column(name: str, present: list[str]) -> str:
    if name not in present:
        return f"NULL AS {quote(name)}"
    if name in (EVENT_TIME, WRITE_TIME):
        return f"CAST({quote(name)} AS TIMESTAMP) AS {quote(name)}"
    return quote(name)


__all__ = ["Overlay", "build_overlay", "snapshot_columns"]
