"""The development stack of airflow-provider-kinesis-doris, outside the provider's wheel.

The Doris stand-in (``doris_server``): its ports (``doris_fe_http``, ``doris_be_http`` on
``doris_http``, ``doris_mysql``) over one ``doris_cluster`` with ``doris_faults`` and
``doris_replies``; its SQL (``doris_schema``, ``doris_tokens``, ``doris_ddl``, ``doris_statements``,
``doris_admin``, ``doris_dml``) over ``doris_sql``'s storage and ``doris_table_models``; Stream
Load's row path (``doris_load_options``, ``doris_loads``, ``doris_load_expressions``,
``doris_load_conversion``) and ``doris_txn``. Also the loopback-only launcher of the emulators
(``stack``), the scenario builders the tests, benchmarks and demo share (``scenario``) and
``make demo`` (``demo``). ``make`` installs it in editable mode
next to the provider; nothing in the provider imports it.
"""
