"""A store declared only in YAML runs and is queryable; a definition change that would break the
existing changelog and checkpoint is refused before the first batch, naming what changed; a
definition the loader cannot honour is refused when it is read."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml
from delta.tables import DeltaTable
from support.reference import ReferenceTopic
from support.reference_windowed import Spec, run

from deltastate.changelog.layout import changelog_columns
from deltastate.changelog.tables import check_definition, sql_string_literal
from deltastate.engine import run_store
from deltastate.errors import StoreDefinitionError
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.ingest.timed_workloads import TimeShape, click_records
from deltastate.query import Queries
from deltastate.snapshot import publish_snapshot
from deltastate.stores import compat, load_store
from deltastate.stores.definition import TombstoneRule

pytestmark = pytest.mark.integration
REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

PAGE_VIEWS = {
    "name": "page_views",
    "type": "window",
    "description": "Clicks per user over tumbling 10 minute windows, and the latest page.",
    "source": {"topic": "clicks", "partitions": 4, "key_field": "user_id", "event_schema": "click.v1"},
    "value": {"schema": "page_views.v1"},
    "aggregations": {"views": {"op": "count"}, "first_ts": {"op": "min", "field": "ts"},
                     "last_page": {"op": "last", "field": "page"}},
    "event_time_field": "ts",
    "window": {"size": "10min", "grace": "1min", "retention": "2h"},
}
PAGE_VIEWS_VALUE = {"version": 1, "fields": [{"name": "views", "type": "long"}, {"name": "first_ts", "type": "long"},
                                             {"name": "last_page", "type": "string"}]}


def schemas_copy(tmp_path: Path) -> Path:
    target = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, target)
    (target / "stores" / "page_views.yaml").write_text(yaml.safe_dump(PAGE_VIEWS))
    (target / "values" / "page_views.v1.json").write_text(json.dumps(PAGE_VIEWS_VALUE))
    return target


def test_store_declared_only_in_yaml_runs_and_is_queryable(broker, spark, make_settings, topic, tmp_path):
    settings = dataclasses.replace(make_settings(), schemas_dir=schemas_copy(tmp_path))
    assert ensure_topic(broker, topic, 4)
    records = list(click_records(800, 10, 5, TimeShape(step_ms=5_000, disorder=0.2, disorder_ms=50_000,
                                                       late=0.02, late_ms=700_000)))
    ref = ReferenceTopic(4, partition_for)
    ref.append(records)
    assert produce_records(broker, topic, records).delivered == len(records)
    run_store(settings, "page_views", once=True, topic=topic)
    publish_snapshot(spark, settings, [load_store(settings, "page_views")])

    expected = run(Spec("window", {"views": ("count", None), "first_ts": ("min", "ts"), "last_page": ("last", "page")},
                        size=600_000, advance=600_000, grace=60_000, retention=7_200_000), ref.records)
    key = max({k for k, _, _ in expected.state}, key=lambda k: sum(1 for e in expected.state if e[0] == k))
    got = Queries(settings).windows("page_views", key)
    want = sorted((s, e, v) for (k, s, e), v in expected.state.items() if k == key)
    assert [(r["window_start"], r["window_end"], {n: r[n] for n in ("views", "first_ts", "last_page")})
            for r in got.rows] == want
    everything = Queries(settings).windows("page_views", None)
    assert len(everything.rows) == len(expected.state)


def test_definition_change_is_refused_before_the_first_batch(broker, spark, make_settings, topic, tmp_path):
    schemas = schemas_copy(tmp_path)
    settings = dataclasses.replace(make_settings(), schemas_dir=schemas)
    assert ensure_topic(broker, topic, 4)
    records = list(click_records(50, 5, 6))
    assert produce_records(broker, topic, records).delivered == len(records)
    first = run_store(settings, "page_views", once=True, topic=topic)
    assert first.records_in == len(records)

    changed = dict(PAGE_VIEWS, window={"size": "5min", "grace": "1min", "retention": "2h"})
    (schemas / "stores" / "page_views.yaml").write_text(yaml.safe_dump(changed))
    more = list(click_records(20, 5, 7, TimeShape(start_ts=1_800_000_000_000)))
    assert produce_records(broker, topic, more).delivered == len(more)
    with pytest.raises(StoreDefinitionError, match=r"window\.size_ms: 600000 -> 300000"):
        run_store(settings, "page_views", once=True, topic=topic)
    intake = spark.read.format("delta").load(settings.table_path("page_views", "intake"))
    assert intake.agg({"records_in": "sum"}).first()[0] == len(records)  # nothing ran under the new definition

    # Retention is how long state is kept, not what it means: changing it is allowed.
    (schemas / "stores" / "page_views.yaml").write_text(yaml.safe_dump(dict(PAGE_VIEWS, window={
        "size": "10min", "grace": "1min", "retention": "3h"})))
    assert run_store(settings, "page_views", once=True, topic=topic).records_in == len(more)


def test_count_with_a_field_is_refused(make_settings, tmp_path):
    schemas = schemas_copy(tmp_path)
    bad = dict(PAGE_VIEWS, aggregations=dict(PAGE_VIEWS["aggregations"], views={"op": "count", "field": "nope"}))
    (schemas / "stores" / "page_views.yaml").write_text(yaml.safe_dump(bad))
    settings = dataclasses.replace(make_settings(), schemas_dir=schemas)
    with pytest.raises(StoreDefinitionError, match=r"aggregations\.views: count reads no field \(got field 'nope'\)"):
        load_store(settings, "page_views")


@pytest.mark.parametrize(("change", "quoted"), [
    ({"required": ["user_id", "page"]}, r"required=\['user_id', 'page'\]"),
    ({"ts": {"type": "integer"}}, r"minimum=None"),
    ({"ts": {"type": "integer", "minimum": -5}}, r"minimum=-5"),
])
def test_an_event_time_the_schema_lets_be_missing_or_negative_is_refused(make_settings, tmp_path, change, quoted):
    """A missing or negative event time would fail a window batch on every replay (or vanish from a
    window store): the definition is refused at load, naming the field and what the schema says."""
    schemas = schemas_copy(tmp_path)
    path = schemas / "events" / "click.v1.json"
    schema = json.loads(path.read_text())
    if "ts" in change:
        schema["properties"]["ts"] = change["ts"]
    else:
        schema.update(change)
    path.write_text(json.dumps(schema))
    settings = dataclasses.replace(make_settings(), schemas_dir=schemas)
    with pytest.raises(StoreDefinitionError, match=rf"page_views.*event_time_field 'ts' must be required .*{quoted}"):
        load_store(settings, "page_views")
    load_store(dataclasses.replace(settings, schemas_dir=REPO_SCHEMAS), "user_sessions")  # the shipped schema passes


@pytest.mark.parametrize("text", ["plain", "it's", 'say "hi"', "back\\slash", "\\'", "é ü 💡", "new\nline"])
def test_sql_string_literals_round_trip_through_spark(spark, text):
    assert spark.sql(f"SELECT {sql_string_literal(text)} AS v").first()["v"] == text


def test_a_changelog_without_its_definition_gets_it_recorded(spark, make_settings, tmp_path):
    """Changelogs created before the definition was recorded at creation get it on their next run,
    intact whatever characters the definition holds, and later changes are then refused."""
    store = dataclasses.replace(load_store(make_settings(), "pulse_counts"),
                                tombstone_rule=TombstoneRule(True, "event", 'check "out" \\ é'))
    path = str(tmp_path / "changelog")
    builder = DeltaTable.create(spark).location(path)
    for name, type_ in changelog_columns(store):
        builder = builder.addColumn(name, type_)
    builder.execute()

    check_definition(spark, path, store)
    recorded = DeltaTable.forPath(spark, path).detail().first()["properties"][compat.PROPERTY]
    assert json.loads(recorded) == compat.fingerprint(store)
    check_definition(spark, path, store)  # the same definition runs
    changed = dataclasses.replace(store, tombstone_rule=TombstoneRule(True, "event", "checkout"))
    with pytest.raises(StoreDefinitionError, match="tombstone"):
        check_definition(spark, path, changed)
