"""Airflow DAGs: deltastate migrate: evolve a store's value schema with no downtime, one step per run.

Manual only. Trigger it from the UI's params form: pick the store (those whose definitions declare
migrations), the target version and the step. plan and status change nothing; start builds the new
version beside the live one and runs it to the topic's end (after logging the plan); cutover stops
the live version's stream, lets the new one finish, gates the switch on great-expectations checks
and publishes; rollback switches back; retire deletes the old version after its hold period. start,
cutover, rollback and retire need *confirm*. Each step's report is in its task log and XCom.
"""

from deltastate.orchestration.dags import migrate_dag

deltastate_migrate = migrate_dag(doc_md=__doc__)
