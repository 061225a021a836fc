"""The fault-injection machinery itself: wrappers fail exactly the chosen calls, and the count
finds every lost and duplicated record."""

from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.testing.faults import FailOnNthCall, InjectedCrash, client_error
from tests.faults.tally import Delivery, ProofTally


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def bump(self, by: int = 1) -> int:
        self.value += by
        return self.value

    def peek(self) -> int:
        return self.value


def test_the_chosen_calls_fail_and_the_others_reach_the_target() -> None:
    target = Counter()
    wrapped = FailOnNthCall(target, "bump", 2, times=2)

    assert wrapped.bump() == 1
    with pytest.raises(InjectedCrash, match="call 2 of bump"):
        wrapped.bump()
    with pytest.raises(InjectedCrash, match="call 3 of bump"):
        wrapped.bump()
    assert wrapped.bump(5) == 6 and wrapped.peek() == 6
    assert (wrapped.calls, wrapped.fired) == (4, 2)


def test_an_applied_failure_reaches_the_target_and_several_methods_share_one_count() -> None:
    """``applied``: the chosen call takes effect and its answer is lost (a write on the wire when
    the process died); calls of the listed methods are numbered together."""
    target = Counter()
    wrapped = FailOnNthCall(target, ("bump", "peek"), 2, applied=True)

    assert wrapped.bump() == 1
    with pytest.raises(InjectedCrash, match="call 2 of bump"):
        wrapped.bump(10)
    assert target.value == 11 and wrapped.peek() == 11
    assert (wrapped.calls, wrapped.fired) == (3, 1)


class Owner:
    """A target whose methods are those of a part (as a checkpoint store's are)."""

    def __init__(self) -> None:
        self.part = Counter()


def test_a_parts_method_fails_where_the_caller_reaches_it_through_the_part() -> None:
    target = Owner()
    wrapped = FailOnNthCall(target, ("part.bump", "part.peek"), 2)

    assert wrapped.part.bump() == 1
    with pytest.raises(InjectedCrash, match="call 2 of peek"):
        wrapped.part.peek()
    assert wrapped.part.bump() == 2 and target.part.value == 2
    assert (wrapped.calls, wrapped.fired) == (3, 1)


def test_a_method_the_target_lacks_is_refused_at_once() -> None:
    """The fault would never strike: a store's methods are named through their part."""
    with pytest.raises(AttributeError, match="'bump'"):
        FailOnNthCall(Owner(), "bump", 1)
    with pytest.raises(AttributeError, match="'part.missing'"):
        FailOnNthCall(Owner(), "part.missing", 1)


def test_client_errors_carry_the_aws_code() -> None:
    wrapped = FailOnNthCall(Counter(), "bump", 1, client_error("ExpiredIteratorException"))

    with pytest.raises(ClientError) as raised:
        wrapped.bump()
    assert raised.value.response["Error"]["Code"] == "ExpiredIteratorException"


def test_before_runs_at_the_chosen_call_and_the_real_call_follows() -> None:
    target, rival_calls = Counter(), []
    wrapped = FailOnNthCall(target, "bump", 2, before=lambda: rival_calls.append(target.bump(100)))

    assert [wrapped.bump(), wrapped.bump()] == [1, 102]
    assert rival_calls == [101] and wrapped.fired == 1


def test_concurrent_callers_share_one_count() -> None:
    wrapped = FailOnNthCall(Counter(), "peek", 10, times=5)
    failures = []

    def call_many() -> None:
        for _ in range(50):
            try:
                wrapped.peek()
            except InjectedCrash:
                failures.append(1)

    threads = [threading.Thread(target=call_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(failures) == 5 and wrapped.calls == 200


def test_delivery_counts_missing_ids_extra_copies_and_reapplied_rows() -> None:
    delivery = Delivery.compare({1, 2, 3, 4}, [1, 1, 1, 2, 4], reapplied=2)

    assert delivery.lost == (3,) and delivery.duplicated == 4 and delivery.produced == 4
    assert Delivery.compare({1, 2}, [2, 1]) == Delivery(produced=2, lost=(), duplicated=0)


def test_the_tally_keeps_bad_trials_and_totals() -> None:
    tally = ProofTally()
    tally.add("seed 1", "http_500", 2, Delivery.compare({1, 2}, [1, 2]), failures=["RetryableStreamLoadError"],
              cell="DUPLICATE/plain/static/single")  # fmt: skip
    tally.add("seed 2", "crash", 1, Delivery.compare({3, 4}, [3, 3]), unresolvable=1)

    report = tally.as_dict()
    assert (report["trials"], report["records_lost"], report["records_duplicated"]) == (2, 1, 1)
    assert report["faults_fired"] == {"crash": 1, "http_500": 2} and report["unresolvable_chunks_reported"] == 1
    assert report["bad_trials"] == ["seed 2: lost [4], duplicated 1"]
    assert "2 trials" in tally.render() and "BAD seed 2" in tally.render()


@pytest.mark.integration
def test_the_stand_in_counts_rows_a_unique_table_hides_and_faults_still_pending() -> None:
    from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
    from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
    from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
    from kinesis_doris_devstack.doris_server import DorisServer
    from kinesis_doris_devstack.scenario import events_table_ddl

    with DorisServer(password="pw") as doris:
        doris.execute_sql("", "CREATE DATABASE d")
        doris.execute_sql("d", events_table_ddl("u", "UNIQUE"))
        client = DorisStreamLoadClient(DorisConnectionConfig(host="127.0.0.1", port=doris.fe_port, password="pw"))
        body = b'{"event_id": 1, "_kinesis_arrival": 5}\n{"event_id": 2, "_kinesis_arrival": 5}\n'
        options = StreamLoadOptions.json_lines(sequence_col="_kinesis_arrival")
        doris.inject_fault("http_500", 2)
        assert doris.pending_faults() == 2
        client.stream_load("d", "u", body, label="first", options=options)
        assert doris.pending_faults() == 1
        doris.clear_faults()
        for label in ("a", "b"):
            assert client.stream_load("d", "u", body, label=label, options=options).status == "Success"

        assert len(doris.execute_sql("d", "SELECT event_id FROM u")) == 2
        assert doris.applied_row_count("d", "u") == 4
