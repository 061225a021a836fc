"""The "Kinesis → Doris" pipeline pages in Airflow 3.1+'s UI (``plugin``): read only."""
