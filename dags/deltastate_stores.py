"""Airflow DAGs: deltastate store DAGs, one set per store declared in schemas/stores/*.yaml.

* `deltastate_run_<store>`: samples the topic through the events suite (a warning, never a block),
  then runs the store's streaming job with an available-now trigger through spark-submit: process
  the backlog, commit, stop. One run at a time, and the Spark driver holds the checkpoint's writer
  lock, so a retry after a killed worker cannot add a second writer. Updates the changelog Asset.
* `deltastate_compact_<store>`: compaction of the Delta changelog; figures in the log and XCom.
* `deltastate_cleanup_<store>`: TTL, window retention and tombstone cleanup; figures likewise.

Spark runs where the `deltastate_spark` connection points (type spark, host = master URL), or
SPARK_MASTER (default local[*]) when there is no such connection.
"""

from deltastate.orchestration.dags import store_dags

for _dag in store_dags(doc_md=__doc__):
    globals()[_dag.dag_id] = _dag
