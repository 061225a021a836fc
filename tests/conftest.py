"""Suite-wide setup: an isolated Airflow home, dummy AWS credentials, and the local stack.

Environment variables are set before anything imports Airflow or boto3, so no test can reach a
real ``~/airflow`` or real AWS.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kd-airflow-home-"))

os.environ.update(
    {
        "AIRFLOW_HOME": str(_AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
)
for _var in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
    os.environ.pop(_var, None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In xdist's workers (``make test`` runs ``--dist loadfile --no-loadscope-reorder``, one test
    module per unit of work), the end-to-end modules come first: handed out last, they would all
    run at once at the end, on a machine they load."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    spark_session = sys.modules.get("pyspark.sql.session")
    if spark_session is not None and spark_session.SparkSession.getActiveSession() is not None:
        spark_session.SparkSession.getActiveSession().stop()
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated Airflow metadata DB (SQLite) in the session's AIRFLOW_HOME."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, timeout=300)
    try:
        # Airflow 2.x: dag_run_note references FAB's ab_user; SQLAlchemy must know that model
        # before dag.test() deletes or rewrites a run.
        import airflow.providers.fab.auth_manager.models  # noqa: F401
    except ImportError:
        pass
    return _AIRFLOW_HOME


def _start_service(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from kinesis_doris_devstack.stack import LocalStack

    with LocalStack(tmp_path_factory.mktemp(name), services=[name]) as stack:
        yield stack.running[name].endpoint


@pytest.fixture(scope="session")
def kinesis_mock_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """kinesis-mock (faithful Kinesis semantics, resharding, paging) on 127.0.0.1."""
    yield from _start_service("kinesis_mock", tmp_path_factory)


@pytest.fixture(scope="session")
def kinesalite_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """kinesalite (fast; no ListShards paging) on 127.0.0.1."""
    yield from _start_service("kinesalite", tmp_path_factory)


@pytest.fixture(scope="session")
def dynamodb_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto server, used for DynamoDB only, on 127.0.0.1."""
    yield from _start_service("dynamodb", tmp_path_factory)


def _client(service: str, endpoint: str):  # type: ignore[no-untyped-def]
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 2, "mode": "standard"}),
    )


@pytest.fixture
def kinesis_client(kinesis_mock_endpoint: str):  # type: ignore[no-untyped-def]
    """A boto3 Kinesis client on kinesis-mock."""
    return _client("kinesis", kinesis_mock_endpoint)


@pytest.fixture
def dynamodb_client(dynamodb_endpoint: str):  # type: ignore[no-untyped-def]
    """A boto3 DynamoDB client on moto."""
    return _client("dynamodb", dynamodb_endpoint)


@pytest.fixture
def moto_sts(dynamodb_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto as every AWS client's STS (``AWS_ENDPOINT_URL_STS``, as an executor's environment
    could set it), with fresh per-process botocore sessions of ``core.aws_clients`` before and after the
    test (they keep the credentials of the environment they were built in)."""
    from airflow_provider_kinesis_doris.core import aws_clients

    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", dynamodb_endpoint)
    aws_clients._botocore_session.cache_clear()
    aws_clients._assumed_role_session.cache_clear()
    yield dynamodb_endpoint
    aws_clients._botocore_session.cache_clear()
    aws_clients._assumed_role_session.cache_clear()


def assumed_roles(moto: str, role_arn: str) -> list[dict[str, Any]]:
    """The sessions of ``role_arn`` moto's STS handed out (keys included), oldest first."""
    import requests

    served = requests.get(f"{moto}/moto-api/data.json", timeout=10).json()["sts"]["AssumedRole"]
    return [entry for entry in served if entry["role_arn"] == role_arn]


DORIS_USER = "loader"
DORIS_PASSWORD = "s3cret-doris-pw"


@pytest.fixture(scope="session")
def doris_server():  # type: ignore[no-untyped-def]
    """The Doris stand-in, in-process, on 127.0.0.1 (user ``loader``, a known password): FE and BE
    HTTP ports and the FE's MySQL protocol port (``query_port``)."""
    from kinesis_doris_devstack.doris_server import DorisServer

    with DorisServer(host="127.0.0.1", user=DORIS_USER, password=DORIS_PASSWORD) as server:
        yield server


@pytest.fixture
def own_doris_server() -> Iterator[Any]:
    """A Doris stand-in of the test's own, to break without touching the session's: user
    ``loader``, ``label_num_threshold`` -1 (labels kept by time only), so every Doris preflight
    item passes until the test breaks one (``tests/preflight_items.py``)."""
    from kinesis_doris_devstack.doris_server import DorisServer

    with DorisServer(host="127.0.0.1", user=DORIS_USER, password=DORIS_PASSWORD) as server:
        server.set_fe_config("label_num_threshold", -1)
        yield server


LABEL_WINDOW_S = 43_200
"""Doris's default streaming_label_keep_max_second, below kinesis-mock's 24 h retention."""
_aws_deployments = itertools.count()


@pytest.fixture
def aws_deployment(kinesis_client: Any, dynamodb_client: Any) -> Any:
    """A stream and a checkpoint table as the operator creates it, point-in-time recovery on: the
    ``AwsPreflightSettings`` of a deployment that passes every AWS preflight item."""
    from airflow_provider_kinesis_doris.core.aws_preflight import AwsPreflightSettings
    from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
    from kinesis_doris_devstack.scenario import create_stream

    n = f"{next(_aws_deployments)}-{datetime.now(timezone.utc):%H%M%S%f}"
    stream, table = f"aws-preflight-{n}", f"aws_preflight_{n}"
    create_stream(kinesis_client, stream, 1)
    dynamo_store(dynamodb_client, table, "p").items.create_table_if_missing()
    dynamodb_client.update_continuous_backups(
        TableName=table, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
    )
    return AwsPreflightSettings(stream, table, f"{stream}.db.t", LABEL_WINDOW_S)


def use_local_stack_connections(
    monkeypatch: pytest.MonkeyPatch, kinesis_endpoint: str, dynamodb_endpoint: str, doris_server: Any, schema: str
) -> None:
    """``aws_default`` and ``doris_default`` pointing at the local stack, set as a user would
    (``AIRFLOW_CONN_*`` environment variables); ``doris_default`` carries both the FE HTTP port
    and the MySQL protocol port (extra ``query_port``)."""
    aws_extra = {"region_name": "us-east-1", "endpoint_url": kinesis_endpoint,
                 "service_config": {"dynamodb": {"endpoint_url": dynamodb_endpoint}}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        {"conn_type": "aws", "login": "testing", "password": "testing-secret-key", "extra": aws_extra}))  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", json.dumps(
        {"conn_type": "doris", "host": "127.0.0.1", "port": doris_server.fe_port, "login": DORIS_USER,
         "password": DORIS_PASSWORD, "schema": schema,
         "extra": {"query_port": doris_server.query_port}}))  # fmt: skip


def events_table_on_local_stack(
    monkeypatch: pytest.MonkeyPatch, kinesis_endpoint: str, dynamodb_endpoint: str, doris_server: Any, database: str,
    table: str,
) -> None:
    """An events table ``database.table`` on the Doris stand-in, with ``aws_default`` and
    ``doris_default`` pointing at the local stack (:func:`use_local_stack_connections`)."""
    from kinesis_doris_devstack.scenario import events_table_ddl

    doris_server.execute_sql("", f"CREATE DATABASE IF NOT EXISTS {database}")
    doris_server.execute_sql(database, events_table_ddl(table))
    use_local_stack_connections(monkeypatch, kinesis_endpoint, dynamodb_endpoint, doris_server, database)


def dag_file_in_a_bundle(monkeypatch: pytest.MonkeyPatch, folder: Path, bundle: str, file_name: str, text: str) -> Path:
    """Write a DAG file into ``folder`` and add the folder to Airflow's DAG bundles (Airflow 3's
    ``dag.test()`` runs only DAGs it finds in a bundle); the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    path.write_text(text)
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "dags-folder", "classpath": local, "kwargs": {}},
        {"name": bundle, "classpath": local, "kwargs": {"path": str(folder)}},
    ]))  # fmt: skip
    return path


@pytest.fixture
def efo_server(kinesis_mock_endpoint: str) -> Iterator[Any]:
    """A SubscribeToShard server in front of kinesis-mock (``kinesis_doris_devstack.efo_server``),
    with short subscriptions and heartbeats; stopped after the test."""
    from kinesis_doris_devstack.efo_server import EfoServer

    with EfoServer(kinesis_mock_endpoint, subscription_seconds=20, heartbeat_seconds=0.2, poll_seconds=0.05) as server:
        yield server


@pytest.fixture
def statsd() -> Iterator[Any]:
    """A statsd server on 127.0.0.1 (``tests.statsd_listener``); its ``port`` takes the metrics."""
    from tests.statsd_listener import StatsdListener

    with StatsdListener() as listener:
        yield listener
