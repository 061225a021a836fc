"""The task's XCom stays small for a stream of a thousand shards and still names what needs a person."""

from __future__ import annotations

import json

from airflow_provider_kinesis_doris.core.commit import CommitResult
from airflow_provider_kinesis_doris.core.report import XCOM_ATTENTION_MAX, RangeReport, xcom_summary
from airflow_provider_kinesis_doris.core.model import ShardState
from airflow_provider_kinesis_doris.core.pipeline import IntervalResult
from airflow_provider_kinesis_doris.core.plan import Plan, ShardDecision, ShardPlan

SHARDS = 1_000


def _result(dead_lettered_every: int = 250) -> IntervalResult:
    shard_ids = [f"shardId-{n:012d}" for n in range(SHARDS)]
    plans = [ShardPlan(shard_id, (), ShardState.OPEN, 3, ShardDecision.NEW) for shard_id in shard_ids[:-1]]
    plans.append(ShardPlan(shard_ids[-1], (shard_ids[0],), ShardState.OPEN, 0, ShardDecision.WAITING, waiting_for=(shard_ids[0],)))
    reports = [
        RangeReport(
            shard_id, 1_000, records=10, rows_loaded=10 - (n % dead_lettered_every == 0), chunks=2,
            dead_lettered=int(n % dead_lettered_every == 0), labels=[f"kd_{shard_id}_{c}_{'x' * 60}" for c in range(2)],
            millis_behind_latest=n,
        )  # fmt: skip
        for n, shard_id in enumerate(shard_ids[:-1])
    ]
    return IntervalResult(Plan("p", "s", 1_000, 2_000, tuple(plans)), tuple(reports), CommitResult())


def test_the_xcom_of_a_thousand_shards_holds_totals_and_only_the_shards_that_need_attention() -> None:
    result = _result()

    xcom = xcom_summary(result)

    assert len(json.dumps(result.summary())) > 200_000, "the full summary is what the task log gets"
    assert len(json.dumps(xcom)) < 4_000
    assert (xcom["shard_count"], xcom["records"], xcom["loaded"], xcom["dead_lettered"]) == (1_000, 9_990, 9_986, 4)
    assert xcom["decisions"] == {"NEW": 999, "WAITING": 1} and xcom["chunks"] == 1_998 and xcom["max_lag_ms"] == 998
    # The four shards with dead letters and the one waiting for its parent, nothing else.
    assert sorted(xcom["attention"]) == ["shardId-000000000000", "shardId-000000000250", "shardId-000000000500",
                                         "shardId-000000000750", "shardId-000000000999"]  # fmt: skip
    assert xcom["attention"]["shardId-000000000999"]["waiting_for"] == ["shardId-000000000000"]
    assert "labels" not in json.dumps(xcom) and xcom["attention_not_listed"] == 0


def test_when_every_shard_needs_attention_the_xcom_names_a_bounded_number_and_counts_the_rest() -> None:
    xcom = xcom_summary(_result(dead_lettered_every=1))

    assert len(xcom["attention"]) == XCOM_ATTENTION_MAX
    assert xcom["attention_not_listed"] == SHARDS - XCOM_ATTENTION_MAX
    assert len(json.dumps(xcom)) < 60_000
