"""Running signing-etl under an orchestrator: Dagster definitions and an example Airflow DAG."""
