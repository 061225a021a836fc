"""I8 after real runs: the Doris password and the AWS secret key appear in no log line (DEBUG,
every logger), no summary (the XCom), no exception text and no repr; spark-submit gets neither.

Redirects to a host that is not allowed never receive ``Authorization``:
``tests/integration/doris/test_stream_load_client.py::test_redirect_to_a_host_not_allowed_never_receives_credentials``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, Position, ShardRange
from airflow_provider_kinesis_doris.core.plan import Plan
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, run_spark_job
from tests.faults.trial import (
    AWS_SECRET_ACCESS_KEY,
    CREDENTIALS,
    DORIS_PASSWORD,
    DORIS_USER,
    LABEL_EXPIRED,
    TrialSpec,
    pipeline_config,
    run_trial,
)

pytestmark = pytest.mark.integration

SPARK_AUTH_SECRET = "spark-auth-secret-on-no-line"
SECRETS = (DORIS_PASSWORD, AWS_SECRET_ACCESS_KEY, base64.b64encode(f"{DORIS_USER}:{DORIS_PASSWORD}".encode()).decode(),
           SPARK_AUTH_SECRET)  # fmt: skip


def _exception_texts(error: BaseException | None) -> Iterator[str]:
    """str and repr of ``error`` and of every exception it was raised from or during."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield str(error)
        yield repr(error)
        error = error.__cause__ or error.__context__


def _leaks(texts: list[str]) -> list[str]:
    return [f"{secret[:4]}… in {text[:200]!r}" for text in texts for secret in SECRETS if secret in text]


@pytest.mark.parametrize("fault", ["reset_before_commit", "http_500", "crash_after_doris_commit", LABEL_EXPIRED])
def test_no_secret_in_logs_summaries_errors_or_reprs_of_a_faulty_run(
    fault: str, proof_stack, caplog: pytest.LogCaptureFixture  # type: ignore[no-untyped-def]
) -> None:
    spec = replace(TrialSpec.from_seed(11), fault=fault, nth=1, times=3, concurrent=False)
    with caplog.at_level(logging.DEBUG):
        result = run_trial(spec, proof_stack)

    assert result.errors, "the fault made at least one run fail"
    assert result.last is not None
    config = pipeline_config(proof_stack, proof_stack.doris, "s", "t")
    texts = [
        caplog.text,
        json.dumps(result.last.summary()),
        repr(result.last),
        repr(config),
        repr(CREDENTIALS),
        repr(LoadJob.of(config, result.last.plan)),
        LoadJob.of(config, result.last.plan).to_json(),
        *(text for error in result.errors for text in _exception_texts(error)),
    ]
    assert len(caplog.records) > 50
    assert _leaks(texts) == []


FAKE_SPARK_SUBMIT = """#!/bin/sh
printf '%s\\n' "$@" > "$KD_FAKE_SPARK_OUT/argv"
env > "$KD_FAKE_SPARK_OUT/env"
previous=""
for argument in "$@"; do
    if [ "$previous" = "--job-file" ]; then
        cp "$argument" "$KD_FAKE_SPARK_OUT/job.json"
        echo "$argument" > "$KD_FAKE_SPARK_OUT/job_path"
        stat -c %a "$(dirname "$argument")"/credentials-*.json > "$KD_FAKE_SPARK_OUT/credentials_mode"
    fi
    if [ "$previous" = "--properties-file" ]; then
        echo "$(stat -c %a "$argument") $(grep secret "$argument")" > "$KD_FAKE_SPARK_OUT/properties"
    fi
    previous="$argument"
done
exit 1
"""


@pytest.mark.airflow
def test_spark_submit_gets_files_not_secrets(proof_stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                             caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    from airflow_provider_kinesis_doris.operators.spark_connections import LoadJobSubmitter

    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text(FAKE_SPARK_SUBMIT)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("KD_FAKE_SPARK_OUT", str(out))
    # The spark connection's password is the cluster's spark.authenticate secret: no command line either.
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FAKE", f"spark://:{SPARK_AUTH_SECRET}@127.0.0.1:7077")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    config = pipeline_config(proof_stack, proof_stack.doris, "proof-spark", "spark_t")
    at = lambda sequence: Boundary("shardId-000000000000", sequence, BoundaryKind.AT, Position(sequence))  # noqa: E731
    shard_range = ShardRange(config.pipeline_id, config.stream_name, "shardId-000000000000", 1, 5, at(1), at(5))
    job = replace(LoadJob.of(config, Plan(config.pipeline_id, config.stream_name, 1, 5, shards=())),
                  ranges=(shard_range,), groups=((0,),))  # fmt: skip

    with caplog.at_level(logging.DEBUG), pytest.raises(Exception, match="Error code is: 1") as failure:
        submitter = LoadJobSubmitter("spark_fake")
        run_spark_job(job, CREDENTIALS, SparkSettings(submitter=submitter, auth_secret=submitter.auth_secret))

    argv = (out / "argv").read_text().splitlines()
    assert argv[:2] == ["--master", "spark://127.0.0.1:7077"] and "--job-file" in argv
    assert re.fullmatch(r".*/credentials-kinesis-doris-\w+\.json", argv[argv.index("--files") + 1])
    assert (out / "credentials_mode").read_text().strip() == "600"
    assert (out / "properties").read_text().strip() == "600 spark.authenticate.secret=" + SPARK_AUTH_SECRET
    assert not os.path.exists((out / "job_path").read_text().strip()), "the private folder is removed"
    # The connection is defined in this test's environment, which spark-submit inherits as any child does.
    env = [line for line in (out / "env").read_text().splitlines() if not line.startswith("AIRFLOW_CONN_SPARK_FAKE=")]
    texts = [*argv, *env, (out / "job.json").read_text(), caplog.text,
             *_exception_texts(failure.value)]  # fmt: skip
    assert _leaks(texts) == []
