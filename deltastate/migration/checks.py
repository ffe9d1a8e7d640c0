"""The checks that gate a cutover, run by great-expectations over one comparison row per state entry
(a key; in window and session stores a key and its window or session bounds):

same_keys        a key is live in the new version exactly when it is live in the old one;
carried_equal    every field the new version carries (renamed, widened) equals the old value;
derived_ok       every derived field equals its expression over the row's aggregated fields.

Compared at the old version's final position: the old stream is stopped, so its audit says which
offsets its state holds; a key whose newest record in the new version came from a later offset
changed after that point and is left out of the first two checks (the derivation is checked on
every live row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.changelog.layout import SOURCE_OFFSET, SOURCE_PARTITION
from deltastate.changelog.reader import STATE_BOOKKEEPING
from deltastate.changelog.rules import latest_per_key
from deltastate.config import Settings
from deltastate.migration.seed import committed_state
from deltastate.quality.suites import Expectation
from deltastate.quality.validate import run_expectations
from deltastate.report import Report
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.expression import value_column

SUITE = "migration"
CHECKS = ("same_keys", "carried_equal", "derived_ok")


@dataclass(frozen=True)
class CheckReport(Report):
    success: bool
    compared: int
    failures: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    data_docs: str = ""

    def summary(self) -> str:
        return ", ".join(f"{name}: {n} keys fail (e.g. {self.examples.get(name, [])[:3]})"
                         for name, n in self.failures.items() if n) or "all checks pass"


def _close(a: Column, b: Column, numeric: bool = True) -> Column:
    """Equal, both null, or (numeric fields) equal within double rounding."""
    if not numeric:
        return a.eqNullSafe(b)
    return a.eqNullSafe(b) | (F.abs(a.cast("double") - b.cast("double"))
                              <= F.lit(1e-9) * F.greatest(F.lit(1.0), F.abs(b.cast("double"))))


def cutover_checks(spark: SparkSession, settings: Settings, old: StoreDefinition, new: StoreDefinition) -> CheckReport:
    [step] = [s for s in new.history if s.version == new.value_version]
    renamed = dict(step.renamed)
    old_state, position = committed_state(spark, settings, old)
    offsets = position.next_offsets
    keys = list(layout.store_key_columns(new))  # window and session entries: key and bounds
    records = spark.read.format("delta").load(settings.table_path(new.storage, layout.CHANGELOG))
    newest = latest_per_key(records, keys, [*new.value_columns, *STATE_BOOKKEEPING, layout.OP], live_only=False)
    ends = F.create_map(*[x for p, o in sorted(offsets.items()) for x in (F.lit(p), F.lit(o))]) if offsets \
        else F.create_map().cast("map<int,bigint>")
    o = old_state.select(*keys, *[F.col(c).alias(f"old__{c}") for c in old.value_columns], F.lit(True).alias("old_live"))
    n = newest.select(*keys, *[F.col(c).alias(f"new__{c}") for c in new.value_columns],
                      (F.col(layout.OP) != layout.OP_DELETE).alias("new_live"),
                      (F.col(SOURCE_OFFSET) < F.coalesce(F.try_element_at(ends, F.col(SOURCE_PARTITION)), F.lit(-1))
                       ).alias("settled"))
    joined = o.join(n, keys, "full_outer")
    # A key the old version holds and the new one never wrote is unsettled only if it could have
    # changed later: it cannot, so it counts (and fails same_keys).
    settled = F.coalesce(F.col("settled"), F.lit(True))
    old_live, new_live = F.coalesce(F.col("old_live"), F.lit(False)), F.coalesce(F.col("new_live"), F.lit(False))
    carried = [(renamed.get(c, c)) for c in old.value_columns if c not in step.dropped]
    equal = F.lit(True)
    for new_name in carried:
        old_name = {v: k for k, v in renamed.items()}.get(new_name, new_name)
        numeric = new.value_field(new_name).type != "string"
        equal = equal & _close(F.col(f"new__{new_name}"), F.col(f"old__{old_name}"), numeric)
    aggregated = {a.target: F.col(f"new__{a.target}") for a in new.aggregations}
    derived_ok = F.lit(True)
    for d in new.derived:
        derived_ok = derived_ok & _close(F.col(f"new__{d.target}"),
                                         value_column(new, d.target, aggregated).cast(new.value_field(d.target).spark_type))
    entry = F.col(layout.KEY) if len(keys) == 1 else F.concat_ws("@", *[F.col(k).cast("string") for k in keys])
    frame = joined.select(
        entry.alias(layout.KEY),
        (~settled | (old_live == new_live)).alias("same_keys"),
        (~settled | ~(old_live & new_live) | equal).alias("carried_equal"),
        (~new_live | derived_ok).alias("derived_ok"),
    ).toPandas()
    expectations = [Expectation("expect_column_values_to_be_in_set", {"column": c, "value_set": [True]})
                    for c in CHECKS]
    report = run_expectations(settings, SUITE, new.name, expectations, frame)
    failures = {c: int((~frame[c].astype(bool)).sum()) for c in CHECKS}
    examples = {c: frame.loc[~frame[c].astype(bool), layout.KEY].head(5).tolist() for c in CHECKS if failures[c]}
    return CheckReport(report.success, len(frame), failures, examples, report.data_docs)
