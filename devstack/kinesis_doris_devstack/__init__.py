"""The development stack of airflow-provider-kinesis-doris, outside the provider's wheel.

The Doris stand-in (``doris_server`` with ``doris_sql``, ``doris_loads``, ``doris_txn``), the
loopback-only launcher of the emulators (``stack``), the scenario builders the tests, benchmarks
and demo share (``scenario``) and ``make demo`` (``demo``). ``make`` installs it in editable mode
next to the provider; nothing in the provider imports it.
"""
