"""DAG factories: one run, compaction and cleanup DAG per declared store, a manual restore DAG and
the gated publish DAG. dags/*.py call these with their own docstring as doc_md.

Parse-time rules (the DAG processor imports these every few seconds): read only the store YAML
files and the environment; never import pyspark or great_expectations, never open a database or
an Airflow connection. Spark work happens in DeltastateSparkOperator at run time.
"""

from __future__ import annotations

from airflow.sdk import DAG, Asset, AssetAny, AssetOrTimeSchedule, CronTriggerTimetable, Param, task

from deltastate.config import Settings, load_settings
from deltastate.orchestration.checks import check_events, choose_migration_step, require_confirm
from deltastate.orchestration.operators import DeltastateSparkOperator
from deltastate.orchestration.options import DagOptions, load_options
from deltastate.stores import list_stores

TAG = "deltastate"


def changelog_asset(settings: Settings, store: str) -> Asset:
    """The Asset a store run updates: its Delta changelog (URI = the table's location)."""
    path = settings.table_path(store, "changelog")
    uri = path if "://" in path else f"file://{path}"
    return Asset(name=f"deltastate.{store}.changelog", uri=uri, group="deltastate")


def snapshot_asset(settings: Settings) -> Asset:
    return Asset(name="deltastate.snapshot", uri=f"file://{settings.snapshots_dir}/CURRENT", group="deltastate")


def _cron(expr: str) -> CronTriggerTimetable | None:
    """A cron schedule in UTC; "none" turns the schedule off (triggers and Assets only)."""
    return None if expr.strip().lower() in ("", "none") else CronTriggerTimetable(expr, timezone="UTC")


def run_dag(settings: Settings, opts: DagOptions, store: str, doc_md: str | None) -> DAG:
    with DAG(dag_id=f"deltastate_run_{store}", schedule=_cron(opts.run_schedule), start_date=opts.start_date,
             catchup=False, max_active_runs=1, default_args=opts.default_args, doc_md=doc_md,
             tags=[TAG, "run", f"store:{store}"],
             description=f"{store}: process the topic's backlog (available-now), commit, stop",
             params={"topic": Param(None, type=["null", "string"], description="source topic override"),
                     "max_offsets_per_trigger": Param(None, type=["null", "integer"], minimum=1,
                                                      description="bound each micro-batch")}) as dag:
        # The sample check reports and never gates (failing records are dead-lettered by the run), so
        # the run does not wait for it: the two tasks run side by side.
        task(task_id="check_events")(check_events)(store_name=store, topic="{{ params.topic or '' }}")
        DeltastateSparkOperator(task_id="run_store", action="run", store=store, topic="{{ params.topic }}",
                                max_offsets_per_trigger="{{ params.max_offsets_per_trigger }}",
                                conn_id=opts.spark_conn_id, outlets=[changelog_asset(settings, store)])
    return dag


def maintenance_dag(opts: DagOptions, store: str, action: str, schedule: str, doc_md: str | None) -> DAG:
    verb = {"compact": "compact the changelog (latest record per key, expired tombstones dropped)",
            "cleanup": "write TTL, retention and tombstone deletes into the changelog"}[action]
    with DAG(dag_id=f"deltastate_{action}_{store}", schedule=_cron(schedule), start_date=opts.start_date,
             catchup=False, max_active_runs=1, default_args=opts.default_args, doc_md=doc_md,
             tags=[TAG, action, f"store:{store}"], description=f"{store}: {verb}",
             params={"topic": Param(None, type=["null", "string"],
                                    description="source topic override (TTL tombstones go to the source topic)")}) as dag:
        DeltastateSparkOperator(task_id=f"{action}_store", action=action, store=store, topic="{{ params.topic }}",
                                conn_id=opts.spark_conn_id)
    return dag


def store_dags(doc_md: str | None = None, settings: Settings | None = None) -> list[DAG]:
    """Run, compaction and cleanup DAGs for every store whose YAML exists now."""
    settings = settings or load_settings()
    opts = load_options()
    dags: list[DAG] = []
    for store in list_stores(settings):
        dags.append(run_dag(settings, opts, store, doc_md))
        dags.append(maintenance_dag(opts, store, "compact", opts.compact_schedule, doc_md))
        dags.append(maintenance_dag(opts, store, "cleanup", opts.cleanup_schedule, doc_md))
    return dags


def restore_dag(doc_md: str | None = None, settings: Settings | None = None) -> DAG:
    """Manual: rebuild a store's state from its changelog into a new checkpoint."""
    settings = settings or load_settings()
    opts = load_options()
    stores = list_stores(settings)
    with DAG(dag_id="deltastate_restore", schedule=None, start_date=opts.start_date, catchup=False,
             max_active_runs=1, default_args={**opts.default_args, "retries": 0}, doc_md=doc_md,
             tags=[TAG, "restore", "manual"], description="rebuild a store's state from its Delta changelog",
             params={"store": Param(stores[0] if stores else "", type="string", enum=stores,
                                    title="Store", description="the store to restore"),
                     "confirm": Param(False, type="boolean", title="Confirm",
                                      description="the store's streaming state is rebuilt; runs must be stopped")},
             ) as dag:
        confirmed = task(task_id="confirm")(require_confirm)(store_name="{{ params.store }}",
                                                              confirm="{{ params.confirm }}")
        restore = DeltastateSparkOperator(task_id="restore_store", action="restore", store="{{ params.store }}",
                                          conn_id=opts.spark_conn_id)
        confirmed >> restore
    return dag


def migrate_dag(doc_md: str | None = None, settings: Settings | None = None) -> DAG:
    """Manual: one migration step (plan, start, status, cutover, rollback, retire) of one store."""
    from deltastate.orchestration.actions import MIGRATION_STEPS
    from deltastate.stores import load_store

    settings = settings or load_settings()
    opts = load_options()
    stores = [s for s in list_stores(settings) if len(load_store(settings, s).versions) > 1]
    versions = sorted({v for s in stores for v in load_store(settings, s).versions[1:]})
    common = {"store": "{{ params.store }}", "conn_id": opts.spark_conn_id}
    with DAG(dag_id="deltastate_migrate", schedule=None, start_date=opts.start_date, catchup=False,
             max_active_runs=1, default_args={**opts.default_args, "retries": 0}, doc_md=doc_md,
             tags=[TAG, "migrate", "manual"], description="evolve a store's value schema beside the live version",
             params={"store": Param(stores[0] if stores else "", type="string", enum=stores or [""], title="Store",
                                    description="a store that declares migrations"),
                     "to_version": Param(versions[0] if versions else 2, type="integer", enum=versions or [2],
                                         title="Target version", description="the value schema version to build"),
                     "action": Param("plan", type="string", enum=list(MIGRATION_STEPS), title="Step",
                                     description="plan and status change nothing; the others need confirm"),
                     "hold_seconds": Param(None, type=["null", "number"], minimum=0, title="Hold (retire)",
                                           description="seconds to keep the old version after cutover; "
                                                       "default: the migration's retire_after"),
                     "confirm": Param(False, type="boolean", title="Confirm",
                                      description="start, cutover, rollback and retire change the store")},
             ) as dag:
        choose = task.branch(task_id="choose_step")(choose_migration_step)(
            store_name="{{ params.store }}", action="{{ params.action }}", confirm="{{ params.confirm }}")
        step_tasks = {step: DeltastateSparkOperator(
            task_id=step, action=f"migrate_{step}", to_version="{{ params.to_version }}",
            hold_seconds="{{ params.hold_seconds }}", **common) for step in MIGRATION_STEPS}
        # Each step hangs off the branch alone: a task downstream of a followed branch is never
        # skipped, so a plan >> start edge would run start after every plan-only run.
        choose >> list(step_tasks.values())
    return dag


def publish_dag(doc_md: str | None = None, settings: Settings | None = None) -> DAG:
    """Gated publish of the global snapshot, on any changelog update and on a schedule."""
    settings = settings or load_settings()
    opts = load_options()
    assets = [changelog_asset(settings, s) for s in list_stores(settings)]
    timetable = _cron(opts.publish_schedule)
    schedule = AssetAny(*assets) if timetable is None else AssetOrTimeSchedule(timetable=timetable, assets=AssetAny(*assets))
    with DAG(dag_id="deltastate_publish", schedule=schedule, start_date=opts.start_date, catchup=False,
             max_active_runs=1, default_args=opts.default_args, doc_md=doc_md, tags=[TAG, "publish"],
             description="validate (great-expectations) and publish the global DuckDB snapshot") as dag:
        DeltastateSparkOperator(task_id="publish_snapshot", action="publish", store="*",
                                conn_id=opts.spark_conn_id, outlets=[snapshot_asset(settings)])
    return dag
