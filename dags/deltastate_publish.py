"""Airflow DAGs: deltastate publish: build the next global DuckDB snapshot, validate it, publish only on success.

Runs whenever a store's changelog Asset is updated (a store run finished) and hourly. The
candidate is checked with great-expectations (changelog suite: ops, keys, batch order; snapshot
suite: unique keys, non-negative counts, window bounds, row count = the changelog's live keys).
On failure the previous snapshot stays current and the task fails with the validation report;
Data Docs are under $DELTASTATE_HOME/quality/gx/uncommitted/data_docs/local_site/index.html.
"""

from deltastate.orchestration.dags import publish_dag

deltastate_publish = publish_dag(doc_md=__doc__)
