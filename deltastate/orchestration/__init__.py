"""Airflow orchestration of deltastate: the Spark operator and hook, DAG factories, the single-writer
lock, and the plugin's store page. dags/ and plugins/ are thin files over this package."""
