"""Airflow DAGs: deltastate restore: rebuild one store's state from its Delta changelog into a new checkpoint.

Manual only. Trigger it from the UI's params form: pick the store (from the store definitions) and
tick *confirm*; stop the store's runs first. The task log shows the restore's progress per batch.
"""

from deltastate.orchestration.dags import restore_dag

deltastate_restore = restore_dag(doc_md=__doc__)
