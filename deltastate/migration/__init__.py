"""Store migrations: plan, start (build the next value schema version beside the live one), status,
cutover, rollback and retire. The CLI and Airflow call these same functions."""
