"""An Airflow DAG that runs signing-etl nightly and maps its exit codes to task states (shown in
docs/orchestration.md; tests/orchestration runs it, with a stand-in for Airflow, against the
sandbox)."""

from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator  # 2.x: airflow.operators.bash
from airflow.sdk import DAG  # Airflow 2.x: from airflow import DAG

PROJECT = "/srv/signing-etl"  # the checkout: .dlt/ holds the keys, warehouse/ the DuckDB file
SIGNING_ETL = f"{PROJECT}/.venv/bin/signing-etl"

with DAG(
    "signing_etl",
    schedule="15 2 * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one writer on the warehouse; one run at a time on each key's limits
):
    load = BashOperator(
        task_id="load",
        bash_command=f"{SIGNING_ETL} load --no-models",  # every configured workspace
        cwd=PROJECT,
        # 75: stopped on purpose (daily limit, request budget): skipped, not failed; what was
        # fetched is loaded and the next run continues. 1, 130, 143: failed, with a one-line
        # reason in the task's log.
        skip_on_exit_code=75,
    )
    models = BashOperator(
        task_id="models",
        bash_command=f"{SIGNING_ETL} models",
        cwd=PROJECT,
        trigger_rule="none_failed",  # after a load that completed or stopped on purpose
    )
    load >> models
