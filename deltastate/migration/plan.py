"""`deltastate migrate plan`: what a migration to version N would do, changing nothing.

Per value field of version N, how it gets its values:
  carry    the same field (renamed and widened where the migration says) copied from the live state;
  derive   computed from the version's aggregated fields on every record;
  replay   a new aggregation whose history is rebuilt from the source topic: possible only when
           Kafka still holds every record the live version ever processed (each partition's earliest
           offset at or below the first offset the live version's audit recorded);
  default  a new aggregation that starts from its declared default and aggregates going forward,
           when the topic no longer holds the whole history.
A plan with a replayed field rebuilds the whole version from the topic; otherwise it is seeded from
the live state at the offsets the live stream committed, then catches up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from deltastate.changelog.intake import audit_position
from deltastate.changelog.tables import table_exists
from deltastate.config import Settings
from deltastate.errors import DeltastateError
from deltastate.report import Report
from deltastate.stores.definition import StoreDefinition


class MigrationError(DeltastateError):
    """A migration step refused; the message names the store, the versions and what to do."""


@dataclass(frozen=True)
class FieldPlan:
    field: str
    type: str
    strategy: str  # carry | derive | replay | default
    source: str  # where its values come from, in words


@dataclass(frozen=True)
class MigrationPlan(Report):
    store: str
    from_version: int
    to_version: int
    fields: tuple[FieldPlan, ...]
    dropped: tuple[str, ...]
    build: str  # "seed" (live state transformed, then catch up) or "replay" (from the earliest offsets)
    coverage: dict[int, dict[str, int | None]] = field(default_factory=dict)  # partition -> offsets
    covered: bool = True
    reason: str = ""
    live_rows: int = 0
    topic_records: int = 0
    work_records: int = 0  # what the build processes: the whole topic (replay), or the live rows plus the lag (seed)
    estimated_seconds: float | None = None  # from this store's last measured build of the same kind
    estimate_note: str = ""


def topic_watermarks(settings: Settings, topic: str) -> dict[int, tuple[int, int]]:
    """Partition -> (earliest offset Kafka holds, next offset to be written); {} for a missing topic."""
    from deltastate.infra.topics import TopicWatch

    with TopicWatch(settings.kafka_bootstrap, "migrate", timeout=15) as watch:
        return {p: watch.watermarks(topic, p) for p in watch.partitions(topic)}


def check_target(live: StoreDefinition, to_version: int) -> None:
    if to_version not in live.versions:
        raise MigrationError(f"store {live.name!r}: no value schema version {to_version}; declared versions: "
                             f"{list(live.versions)} (add a migrations: entry and schemas/values/{live.name}.v"
                             f"{to_version}.json)")
    if to_version != live.value_version + 1:
        raise MigrationError(f"store {live.name!r}: the current version is {live.value_version}; a migration "
                             f"builds the next one ({live.value_version + 1}), not {to_version}")


def plan_migration(spark: SparkSession, settings: Settings, live: StoreDefinition,
                   target: StoreDefinition) -> MigrationPlan:
    check_target(live, target.value_version)
    [step] = [s for s in target.history if s.version == target.value_version]
    renamed = dict(step.renamed)
    defaults = dict(step.defaults)
    audited = audit_position(spark, settings, live).ranges
    firsts = {p: lo for p, (lo, _hi) in audited.items()}
    marks = topic_watermarks(settings, live.source.topic)
    coverage = {p: {"earliest_in_topic": marks.get(p, (None, None))[0], "first_processed": firsts.get(p),
                    "end": marks.get(p, (None, None))[1]} for p in sorted(set(firsts) | set(marks))}
    lost = [p for p, c in coverage.items()
            if c["first_processed"] is not None and (c["earliest_in_topic"] or 0) > c["first_processed"]]
    covered = not lost
    reason = ("the topic holds every record since the live version began" if covered else
              f"partitions {lost}: Kafka's earliest offset is past the first offset the live version processed "
              "(the topic's retention deleted records)")
    derived = {d.target: d.expression for d in target.derived}
    fields = []
    for f in target.value_fields:
        if f.name in derived:
            fields.append(FieldPlan(f.name, f.type, "derive", derived[f.name]))
        elif f.name in step.added:
            agg = next(a for a in target.aggregations if a.target == f.name)
            what = f"{agg.op}({agg.source_field or ''})"
            if covered:
                fields.append(FieldPlan(f.name, f.type, "replay", f"{what} over the topic from its earliest offsets"))
            elif f.name in defaults:
                fields.append(FieldPlan(f.name, f.type, "default",
                                        f"{defaults[f.name]!r}, then {what} going forward"))
            else:
                raise MigrationError(f"store {live.name!r}: version {target.value_version} adds {f.name!r}, whose "
                                     f"history cannot be replayed ({reason}), and declares no default for it "
                                     f"(migrations: defaults: {{{f.name}: ...}})")
        else:
            old = {v: k for k, v in renamed.items()}.get(f.name, f.name)
            widened = next((w for w in step.widened if w[0] == f.name), None)
            source = old + (" (renamed)" if old != f.name else "") + (
                f" widened {widened[1]} -> {widened[2]}" if widened else "")
            fields.append(FieldPlan(f.name, f.type, "carry", source))
    build = "replay" if any(fp.strategy == "replay" for fp in fields) else "seed"
    from deltastate.changelog.reader import latest_state

    live_rows = latest_state(spark, settings, live).count() if table_exists(
        spark, settings.table_path(live.storage, "changelog")) else 0
    topic_records = sum(hi - lo for lo, hi in marks.values())
    done = {p: hi + 1 for p, (_lo, hi) in audited.items()}
    work = topic_records if build == "replay" else live_rows + sum(
        max(0, hi - done.get(p, lo)) for p, (lo, hi) in marks.items())
    estimated, note = estimate(settings, live.name, build, work)
    return MigrationPlan(
        store=live.name, from_version=live.value_version, to_version=target.value_version, fields=tuple(fields),
        dropped=step.dropped, build=build, coverage=coverage, covered=covered, reason=reason, live_rows=live_rows,
        topic_records=topic_records, work_records=work, estimated_seconds=estimated, estimate_note=note)


def estimate(settings: Settings, store: str, build: str, work: int) -> tuple[float | None, str]:
    """Seconds for `work` records at the rate this store's last build of the same kind measured."""
    from deltastate.stores.current import read_record

    rate = read_record(settings, store).rates.get(build)
    if not rate or not rate.seconds:
        return None, (f"no {build} build of this store measured yet (each `migrate start` records its rate; "
                      "`deltastate bench migrate` measures both kinds)")
    per_s = rate.records / rate.seconds
    return round(work / per_s, 1), f"at {per_s:,.0f} records/s, measured by the last {build} build"
