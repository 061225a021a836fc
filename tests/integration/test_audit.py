"""The audit (``core.audit``) on the real local stack: a span loaded for real passes; each fault
injected into Doris or the checkpoint table afterwards is found (a row loaded twice, a row gone,
an interval never planned, a shard stuck), through the MySQL protocol as a user's Airflow runs it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import pymysql
import pytest

from airflow_provider_kinesis_doris.core.audit import AuditTarget, audit
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.kinesis.reader import positions_between
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardInfo, ShardRange, describe_instant
from airflow_provider_kinesis_doris.core.stores.memory import memory_store
from kinesis_doris_devstack.scenario import event, now_ms, put_events, put_records, sealed_end, wait_past
from tests.conftest import DORIS_PASSWORD, DORIS_USER
from tests.integration.conftest import DB

pytestmark = pytest.mark.integration

AUDITED = ("_kinesis_shard", "_kinesis_sequence", "_kinesis_arrival")


@pytest.fixture
def run_sql(doris_server: Any) -> Iterator[Any]:
    """Queries over the stand-in's MySQL protocol port, every row of the answer."""
    connection = pymysql.connect(
        host="127.0.0.1", port=doris_server.query_port, user=DORIS_USER, password=DORIS_PASSWORD, database=DB
    )

    def run(statement: str) -> Sequence[Sequence[Any]]:
        with connection.cursor() as cursor:
            cursor.execute(statement)
            return cursor.fetchall()

    yield run
    connection.close()


@pytest.fixture
def loaded(world: dict[str, Any], kinesis_client: Any) -> dict[str, Any]:
    """Two consecutive intervals loaded for real, 20 events and 2 dead letters in each."""
    config = replace(world["config"], mapping=RecordMapping(metadata_columns=AUDITED, required_fields=("event_id",)))
    bounds = [now_ms()]
    for batch in range(2):
        wait_past(bounds[-1])
        results = put_events(kinesis_client, world["stream"], [event(batch * 100 + i) for i in range(20)])
        results += put_records(kinesis_client, world["stream"], [(f"k{i}", b"not json") for i in range(2)])
        bounds.append(sealed_end(kinesis_client, world["stream"], results))
    for start, end in zip(bounds, bounds[1:]):
        world["run"](start, end, config)
    target = AuditTarget(DB, world["table"], world["stream"], f"{world['table']}_dead_letter")
    return {**world, "config": config, "bounds": bounds, "target": target}


def _audit(loaded: dict[str, Any], run_sql: Any, start: int | None = None, end: int | None = None, read_positions: Any = None) -> Any:
    bounds = loaded["bounds"]
    return audit(
        loaded["store"], run_sql, loaded["target"], bounds[0] if start is None else start, end or bounds[-1], read_positions
    )  # fmt: skip


def _reread(loaded: dict[str, Any], kinesis_client: Any) -> Any:
    return partial(positions_between, kinesis_client, loaded["stream"])


def test_a_span_loaded_for_real_passes(loaded: dict[str, Any], run_sql: Any) -> None:
    report = _audit(loaded, run_sql)

    assert report.differences() == []
    summary = report.summary()
    assert summary["ok"] and summary["rows_found"] == summary["rows_held"] == 40
    assert summary["dead_letters_held"] == 4
    assert {a.state for a in report.ranges} == {"LOADED"} and len({a.interval for a in report.ranges}) == 2
    assert "DIFFERS" not in report.table() and report.table().count("\n") == len(report.ranges)


def test_a_row_loaded_twice_is_found(loaded: dict[str, Any], run_sql: Any, doris_server: Any) -> None:
    """Another load of a row the pipeline loaded (a second loader, a manual re-run): a label of its own."""
    columns = ("event_id", "user_id", "amount", *AUDITED)
    row = run_sql(f"SELECT {', '.join(columns)} FROM {loaded['table']} WHERE event_id = 105")[0]
    _load(loaded, "manual-copy", [dict(zip(columns, row))])

    report = _audit(loaded, run_sql)

    assert [(d.shard_id, d.sequence, d.copies) for d in report.duplicates] == [(row[3], row[4], 2)]
    (different,) = [a for a in report.ranges if a.difference() is not None]
    assert different.shard_id == row[3] and different.rows_held is not None
    assert different.rows_found == different.rows_held + 1 and "in the table" in str(different.difference())
    assert "DIFFERS" in report.table() and not report.summary()["ok"]


def _load(loaded: dict[str, Any], label: str, rows: Sequence[dict[str, Any]]) -> None:
    config = replace(loaded["config"].doris, password=DORIS_PASSWORD)
    with DorisStreamLoadClient(config) as client:
        body = b"\n".join(json.dumps(row).encode() for row in rows)
        client.load_idempotently(DB, loaded["table"], label, body, StreamLoadOptions.json_lines())


def test_a_row_deleted_from_the_table_is_found(loaded: dict[str, Any], run_sql: Any, doris_server: Any) -> None:
    columns = ("event_id", "user_id", "amount", *AUDITED)
    rows = [dict(zip(columns, row)) for row in run_sql(f"SELECT {', '.join(columns)} FROM {loaded['table']}")]
    (shard,) = [row["_kinesis_shard"] for row in rows if row["event_id"] == 3]
    # The stand-in answers no DELETE statement: the table is emptied and loaded again without the row.
    run_sql(f"TRUNCATE TABLE {loaded['table']}")
    _load(loaded, "reload-without-3", [row for row in rows if row["event_id"] != 3])

    report = _audit(loaded, run_sql)

    assert report.duplicates == () and len(report.differences()) == 1
    (different,) = [a for a in report.ranges if a.difference() is not None]
    assert (different.shard_id, different.interval[0]) == (shard, loaded["bounds"][0])
    assert different.rows_held is not None and different.rows_found == different.rows_held - 1


def test_a_row_deleted_and_another_of_its_shard_loaded_twice_are_both_found(
    loaded: dict[str, Any], run_sql: Any, doris_server: Any
) -> None:
    """Counting rows per shard saw nothing here: one row gone and one row twice keep the count. By
    record (distinct sequences), the missing record is reported beside the copy."""
    columns = ("event_id", "user_id", "amount", *AUDITED)
    rows = [dict(zip(columns, row)) for row in run_sql(f"SELECT {', '.join(columns)} FROM {loaded['table']}")]
    (gone,) = [row for row in rows if row["event_id"] == 3]
    twice = next(row for row in rows if row["_kinesis_shard"] == gone["_kinesis_shard"] and row["event_id"] not in (3,)
                 and (row["_kinesis_arrival"] < loaded["bounds"][1]) == (gone["_kinesis_arrival"] < loaded["bounds"][1]))
    run_sql(f"TRUNCATE TABLE {loaded['table']}")
    _load(loaded, "reload-without-3-with-a-copy", [row for row in rows if row["event_id"] != 3] + [twice])

    report = _audit(loaded, run_sql)

    assert [(d.shard_id, d.sequence, d.copies) for d in report.duplicates] == [(twice["_kinesis_shard"], twice["_kinesis_sequence"], 2)]
    (different,) = [a for a in report.ranges if a.difference() is not None]
    assert different.rows_found == different.rows_held, "the row count alone agrees"
    assert "1 of its" in str(different.difference()) and "records loaded are missing from the table" in str(different.difference())
    assert "1 extra copy of its records in the table" in str(different.difference())
    # Which record: its chunk, from the checkpoint table alone (Kinesis not read).
    (chunk,) = different.missing
    assert chunk.startswith("record(s) of chunk ") and different.extra == ()
    first, _, last = chunk.removeprefix("record(s) of chunk ").partition(" ")[0].partition("..")
    assert Position.decode(first) <= Position.decode(gone["_kinesis_sequence"]) <= Position.decode(last)


def test_a_missing_record_is_named_by_its_sequence(loaded: dict[str, Any], run_sql: Any, kinesis_client: Any) -> None:
    """Before, the audit said how many records of a shard were missing, never which: the copy was
    named, the lost record not."""
    columns = ("event_id", "user_id", "amount", *AUDITED)
    rows = [dict(zip(columns, row)) for row in run_sql(f"SELECT {', '.join(columns)} FROM {loaded['table']}")]
    gone = [row for row in rows if row["event_id"] in (3, 104)]
    run_sql(f"TRUNCATE TABLE {loaded['table']}")
    _load(loaded, "reload-without-two", [row for row in rows if row not in gone])

    report = _audit(loaded, run_sql, read_positions=_reread(loaded, kinesis_client))

    named = {(a.shard_id, record) for a in report.ranges for record in a.missing}
    assert named == {(row["_kinesis_shard"], row["_kinesis_sequence"]) for row in gone}
    for row in gone:
        assert any(row["_kinesis_sequence"] in text for text in report.differences())


def test_a_record_no_range_loaded_is_named(loaded: dict[str, Any], run_sql: Any, kinesis_client: Any) -> None:
    """A row of a shard's interval that none of the range's chunks loaded (another writer's, a
    made-up sequence) is named by its position."""
    columns = ("event_id", "user_id", "amount", *AUDITED)
    rows = [dict(zip(columns, row)) for row in run_sql(f"SELECT {', '.join(columns)} FROM {loaded['table']}")]
    model = min(rows, key=lambda row: row["_kinesis_arrival"])
    stranger = {**model, "event_id": 999, "_kinesis_sequence": "1:0"}
    _load(loaded, "a-stranger", [stranger])

    report = _audit(loaded, run_sql, read_positions=_reread(loaded, kinesis_client))

    (different,) = [a for a in report.ranges if a.difference() is not None]
    assert different.shard_id == model["_kinesis_shard"] and different.extra == ("1:0",) and different.missing == ()
    assert "1 record(s) in the table that it never loaded: 1:0" in str(different.difference())


def test_a_span_from_before_the_pipelines_first_interval_starts_there(loaded: dict[str, Any], run_sql: Any) -> None:
    """Before, the time before the first interval was reported "never planned" and the audit failed."""
    first = loaded["bounds"][0]

    report = _audit(loaded, run_sql, start=first - 3_600_000)

    assert report.ok and report.span[0] == first, report.differences()
    assert report.summary()["notes"] == [f"the pipeline starts at {describe_instant(first)}: the audit starts there"]


def test_an_interval_never_planned_is_found(loaded: dict[str, Any], run_sql: Any, kinesis_client: Any) -> None:
    """Records of an interval no run planned (Airflow skipped it, and no later run caught up yet)."""
    bounds = loaded["bounds"]
    wait_past(bounds[-1])
    results = put_events(kinesis_client, loaded["stream"], [event(900 + i) for i in range(5)])
    skipped_end = sealed_end(kinesis_client, loaded["stream"], results)

    report = _audit(loaded, run_sql, end=skipped_end)

    assert report.unplanned == ((bounds[-1], skipped_end),)
    assert any("never planned" in text for text in report.differences())
    assert report.summary()["rows_found"] == 40  # the gap holds no row: nothing loaded it


def test_a_shard_stuck_on_a_range_planned_and_never_loaded_is_found(
    loaded: dict[str, Any], run_sql: Any, kinesis_client: Any
) -> None:
    """A run that planned its interval and whose load died (its Spark application killed), never retried."""
    bounds = loaded["bounds"]
    wait_past(bounds[-1])
    results = put_events(kinesis_client, loaded["stream"], [event(700 + i) for i in range(6)])
    end = sealed_end(kinesis_client, loaded["stream"], results)

    def lost(job: Any, credentials: Any) -> Any:
        raise RuntimeError("the Spark application was killed")

    with pytest.raises(RuntimeError, match="killed"):
        loaded["run"](bounds[-1], end, loaded["config"], runner=lost)

    report = _audit(loaded, run_sql, end=end)

    stuck = [a for a in report.ranges if a.state == "PLANNED"]
    assert stuck and {a.interval for a in stuck} == {(bounds[-1], end)}
    assert all("planned, not loaded (stuck)" in (a.difference() or "") for a in stuck)
    assert not report.ok


def test_a_table_without_the_metadata_columns_is_refused(loaded: dict[str, Any], run_sql: Any, doris_server: Any) -> None:
    doris_server.execute_sql(DB, f"CREATE TABLE bare_{loaded['table']} (event_id BIGINT) DUPLICATE KEY(event_id) "
                                 "DISTRIBUTED BY HASH(event_id) BUCKETS 1 PROPERTIES (\"replication_num\" = \"1\")")  # fmt: skip
    target = replace(loaded["target"], table=f"bare_{loaded['table']}")

    with pytest.raises(ConfigurationError, match="_kinesis_shard, _kinesis_sequence, _kinesis_arrival"):
        audit(loaded["store"], run_sql, target, loaded["bounds"][0], loaded["bounds"][-1])


def test_a_closed_shard_loaded_to_its_end_and_never_drained_is_stuck(world: dict[str, Any], doris_server: Any) -> None:
    """The commit that drains a shard died after moving its mark to SHARD_END: it stays CLOSED."""
    store = memory_store("audit-stuck")
    shard_id, start, end = "shardId-000000000007", 1_000_000, 1_060_000
    store.ledger.register_shard(ShardInfo(shard_id, (), 0, 2**128 - 1, 0, is_open=False))
    store.ranges.register_interval(start, end)
    cuts = (Boundary(shard_id, start, BoundaryKind.SHARD_START), Boundary(shard_id, end, BoundaryKind.SHARD_END))
    for cut in cuts:
        store.ledger.put_boundary(cut)
    store.ranges.create_range(ShardRange("audit-stuck", world["stream"], shard_id, start, end, *cuts))
    store.ranges.mark_range_loaded(shard_id, start)
    store.marks.advance_high_water_mark(shard_id)
    target = AuditTarget(DB, world["table"], world["stream"])

    report = audit(store, lambda sql: doris_server.execute_sql(DB, sql), target, start, end)

    assert report.stuck == (f"shard {shard_id}: closed and loaded to its end (SHARD_END at {describe_instant(end)}), never marked drained",)
    store.marks.mark_drained(shard_id)
    assert audit(store, lambda sql: doris_server.execute_sql(DB, sql), target, start, end).ok
