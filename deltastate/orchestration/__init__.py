"""Airflow orchestration of deltastate: the Spark operator and hook, the actions a task runs, DAG
factories, and the plugin's store page. dags/ and plugins/ are thin files over this package."""
