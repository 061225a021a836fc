"""The local stack: Kinesis and DynamoDB emulators and the Doris stand-in, on loopback only.

Every service runs as a child process bound to 127.0.0.1 on a free port and is stopped by its
own PID (SIGTERM, then SIGKILL), also when the caller fails. The endpoints are written to a JSON
file that tests and the demo read.

- ``kinesis-mock`` (npm ``kinesis-local``): faithful semantics (ListShards paging, resharding,
  ChildShards, iterator expiry). Slow (~1k puts/s): keep fixtures small. The one to point your
  own DAGs at.
- ``kinesalite`` (npm): fast, for volume (the benchmarks); no ListShards paging (a NextToken call
  kills it).
- ``moto`` (server mode): DynamoDB only. Never use its Kinesis for resharding.
- ``doris``: ``kinesis_doris_devstack.doris_server``, the Stream Load compatible stand-in.

Command line (``--help`` explains each option)::

    python -m kinesis_doris_devstack.stack up [--state-dir D] [--services ...] [--env-file F]
    python -m kinesis_doris_devstack.stack down [--state-dir D] [--env-file F]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
ALL_SERVICES = ("kinesis_mock", "kinesalite", "dynamodb", "doris")
# What a DAG needs: one Kinesis (kinesis-mock, for its faithful resharding), DynamoDB and Doris.
DAG_SERVICES = ("kinesis_mock", "dynamodb", "doris")
ENV_FILE_NAME = "airflow-connections.env"
CONNECTION_TESTS_ON = {"AIRFLOW__CORE__TEST_CONNECTION": "Enabled"}
"""Airflow refuses ``airflow connections test`` unless this is set (off by default since 2.7): on
for the local stack, whose connections are worth testing before a DAG runs."""
DEFAULT_STATE_DIR = Path(".local-stack")
DORIS_USER = "root"
# The stand-in's password is a fixed, public test value; it is passed through the environment so
# that the stack exercises the same no-secret-on-argv path as production code.
DORIS_PASSWORD = "local-stack-password"
_PRELOAD = Path(__file__).with_name("loopback.js")


def free_port() -> int:
    """A TCP port that was free on loopback a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def local_client(service: str, endpoint: str, config: Any = None) -> Any:
    """A boto3 client for an emulator: dummy credentials, fixed region, the given endpoint and
    ``botocore.config.Config``."""
    import boto3

    return boto3.client(
        service, endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="local", aws_secret_access_key="local",
        config=config,
    )  # fmt: skip


def find_node_modules(start: Path | None = None) -> Path:
    """The ``node_modules`` folder holding the emulators: ``$KINESIS_DORIS_NODE_MODULES``, or the
    nearest one above the working directory or this package."""
    override = os.environ.get("KINESIS_DORIS_NODE_MODULES")
    searched = (
        [Path(override)]
        if override
        else [folder / "node_modules" for base in (start or Path.cwd(), Path(__file__).resolve()) for folder in (base, *base.parents)]
    )
    for candidate in searched:
        if (candidate / "kinesis-local").is_dir() and (candidate / "kinesalite").is_dir():
            return candidate
    raise FileNotFoundError(
        "node_modules with kinesis-local and kinesalite not found; run `npm ci` at the repository root "
        "or set KINESIS_DORIS_NODE_MODULES"
    )


@dataclass
class ServiceProcess:
    """One emulator child process and the endpoint it serves."""

    name: str
    process: subprocess.Popen[bytes]
    endpoint: str
    log_path: Path
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 3.0) -> None:
        # A short grace: kinesis-mock waits for idle keep-alive clients before exiting on SIGTERM.
        stop_pid(self.pid, timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1)

    def describe(self) -> dict[str, object]:
        return {"endpoint": self.endpoint, "pid": self.pid, "log": str(self.log_path), **self.extra}


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process (and the group it leads), then SIGKILL if it is still there."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: probe with signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return finished == 0


def _spawn(name: str, argv: Sequence[str], env: dict[str, str], log_dir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(  # noqa: S603 - argv is built here, never from user input
            list(argv),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,  # own process group: stop_pid takes its children too
        )
    return process, log_path


def _wait_http(name: str, process: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float) -> None:
    """Wait until ``url`` answers anything over HTTP (any status counts as up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} while starting; see {log_path}")
        try:
            urllib.request.urlopen(url, timeout=1).close()  # noqa: S310 - loopback URL built here
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    stop_pid(process.pid)
    raise TimeoutError(f"{name} did not answer on {url} within {timeout:.0f}s; see {log_path}")


def start_kinesis_mock(log_dir: Path, *, shard_limit: int = 500, timeout: float = 60.0) -> ServiceProcess:
    """kinesis-mock over plain HTTP on a free loopback port."""
    modules = find_node_modules()
    port, tls_port = free_port(), free_port()
    env = {
        "KINESIS_MOCK_PLAIN_PORT": str(port),
        "KINESIS_MOCK_TLS_PORT": str(tls_port),
        "KINESIS_MOCK_CERT_PATH": str(modules / "kinesis-local" / "server.json"),
        "SHARD_LIMIT": str(shard_limit),
        "LOG_LEVEL": "WARN",
        # Resharding and stream creation are asynchronous in AWS; keep the delay, but short.
        "CREATE_STREAM_DURATION": "100ms",
        "SPLIT_SHARD_DURATION": "100ms",
        "MERGE_SHARDS_DURATION": "100ms",
        "UPDATE_SHARD_COUNT_DURATION": "100ms",
    }
    argv = ["node", "-r", str(_PRELOAD), str(modules / "kinesis-local" / "main.js")]
    process, log_path = _spawn("kinesis_mock", argv, env, log_dir)
    endpoint = f"http://{LOOPBACK}:{port}"
    _wait_http("kinesis-mock", process, endpoint, log_path, timeout)
    return ServiceProcess("kinesis_mock", process, endpoint, log_path)


def start_kinesalite(log_dir: Path, *, timeout: float = 30.0) -> ServiceProcess:
    """kinesalite, in memory, on a free loopback port."""
    modules = find_node_modules()
    port = free_port()
    argv = [
        "node", "-r", str(_PRELOAD), str(modules / "kinesalite" / "cli.js"),
        "--port", str(port), "--shardLimit", "1000", "--createStreamMs", "10",
        "--deleteStreamMs", "10", "--updateStreamMs", "10",
    ]  # fmt: skip
    process, log_path = _spawn("kinesalite", argv, {}, log_dir)
    endpoint = f"http://{LOOPBACK}:{port}"
    _wait_http("kinesalite", process, endpoint, log_path, timeout)
    return ServiceProcess("kinesalite", process, endpoint, log_path)


def start_dynamodb(log_dir: Path, *, timeout: float = 60.0) -> ServiceProcess:
    """moto in server mode (used for DynamoDB only)."""
    port = free_port()
    argv = [sys.executable, "-m", "kinesis_doris_devstack.moto_server", "-H", LOOPBACK, "-p", str(port)]
    process, log_path = _spawn("dynamodb", argv, {}, log_dir)
    endpoint = f"http://{LOOPBACK}:{port}"
    _wait_http("moto", process, endpoint, log_path, timeout)
    return ServiceProcess("dynamodb", process, endpoint, log_path)


def start_doris(log_dir: Path, *, data_dir: Path | None = None, timeout: float = 30.0) -> ServiceProcess:
    """The Doris stand-in (FE HTTP, BE and FE MySQL protocol ports) as a child process; it binds
    the MySQL port before the HTTP ones, so a healthy FE means all three listen."""
    fe_port, be_port, query_port = free_port(), free_port(), free_port()
    argv = [
        sys.executable, "-m", "kinesis_doris_devstack.doris_server",
        "--host", LOOPBACK, "--fe-port", str(fe_port), "--be-port", str(be_port), "--query-port", str(query_port),
        "--user", DORIS_USER,
    ]  # fmt: skip
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    process, log_path = _spawn("doris", argv, {"DORIS_STANDIN_PASSWORD": DORIS_PASSWORD}, log_dir)
    endpoint = f"http://{LOOPBACK}:{fe_port}"
    _wait_http("doris stand-in", process, f"{endpoint}/api/health", log_path, timeout)
    return ServiceProcess(
        "doris", process, endpoint, log_path,
        extra={"fe_port": fe_port, "be_port": be_port, "query_port": query_port, "user": DORIS_USER,
               "password": DORIS_PASSWORD},
    )  # fmt: skip


def start_spark_cluster(
    log_dir: Path, *, cores: int = 2, memory: str = "1g", timeout: float = 90.0, auth_secret: str | None = None
) -> list[ServiceProcess]:
    """A standalone Spark master and one worker on loopback, from the pip package's own
    ``spark-class``; the master's URL is the first service's endpoint.

    The worker (and so its executors) works and keeps its temporary files in folders of its own.
    With ``auth_secret``, master and worker require ``spark.authenticate`` with that secret and
    encrypt RPC (``spark.network.crypto.enabled``); the settings are in a 0600
    ``spark-defaults.conf``, not on their command lines.
    """
    import pyspark

    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    env = {"SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": LOOPBACK, "SPARK_NO_DAEMONIZE": "1"}
    if auth_secret:
        conf_dir = log_dir / "conf"
        conf_dir.mkdir(mode=0o700)
        descriptor = os.open(conf_dir / "spark-defaults.conf", os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(f"spark.authenticate true\nspark.authenticate.secret {auth_secret}\nspark.network.crypto.enabled true\n")
        env["SPARK_CONF_DIR"] = str(conf_dir)
    port, web = free_port(), free_port()
    master_url = f"spark://{LOOPBACK}:{port}"
    argv = [spark_class, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(port), "--webui-port", str(web)]
    process, log_path = _spawn("spark_master", argv, env, log_dir)
    master = ServiceProcess("spark_master", process, master_url, log_path)
    try:
        _wait_http("spark master", process, f"http://{LOOPBACK}:{web}", log_path, timeout)
        worker_argv = [
            spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", LOOPBACK,
            "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory,
        ]  # fmt: skip
        worker_dir, worker_tmp = log_dir / "worker-work", log_dir / "worker-tmp"
        worker_tmp.mkdir()
        worker_env = {**env, "SPARK_WORKER_DIR": str(worker_dir), "SPARK_LOCAL_DIRS": str(worker_tmp), "TMPDIR": str(worker_tmp)}
        process, log_path = _spawn("spark_worker", worker_argv, worker_env, log_dir)
        worker = ServiceProcess("spark_worker", process, master_url, log_path)
        _wait_for_log(worker, "Successfully registered with master", timeout)
    except BaseException:
        master.stop()
        raise
    return [master, worker]


def start_spark_connect_server(
    log_dir: Path, *, python: str | None = None, token: str | None = None, master: str = "local[2]",
    timeout: float = 90.0,
) -> ServiceProcess:
    """The Spark Connect server the pip package ships (``SparkConnectServer``, started by its
    ``spark-submit`` as ``sbin/start-connect-server.sh`` does, in the foreground) with a
    ``master`` of its own, its gRPC endpoint and driver on loopback only; the endpoint is
    ``sc://127.0.0.1:<port>``.

    ``python`` is what the server runs for its Python workers (``PYSPARK_PYTHON`` and
    ``PYSPARK_DRIVER_PYTHON``): the planner
    workers of its driver and the executors' workers both import the load job's code, so it is an
    environment with this provider installed (a real server's, not the client's). With ``token``
    the server refuses every call without that bearer token (``SPARK_CONNECT_AUTHENTICATE_TOKEN``,
    in its environment, never on its command line). The server keeps its files under ``log_dir``.
    """
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    port = free_port()
    local_dir = log_dir / "connect-tmp"
    local_dir.mkdir(exist_ok=True)
    env = {"SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": LOOPBACK, "TMPDIR": str(local_dir)}
    if python:
        # The driver's planner workers take PYSPARK_DRIVER_PYTHON first (a caller's may be set).
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = python
    if token:
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    conf = {
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.host": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.local.dir": str(local_dir),
    }
    argv = [
        str(spark_home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name", "Spark Connect server", "--master", master,
        *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
    ]  # fmt: skip
    process, log_path = _spawn("spark_connect", argv, env, log_dir)
    server = ServiceProcess("spark_connect", process, f"sc://{LOOPBACK}:{port}", log_path, extra={"port": port})
    _wait_tcp(server, port, timeout)
    return server


def _wait_tcp(service: ServiceProcess, port: int, timeout: float) -> None:
    """Wait until ``service`` accepts TCP connections on loopback ``port`` (a gRPC server answers
    no HTTP/1 request); stop it if it does not in time or exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            returncode = service.process.returncode
            raise RuntimeError(f"{service.name} exited with {returncode} while starting; see {service.log_path}")
        try:
            socket.create_connection((LOOPBACK, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    service.stop()
    raise TimeoutError(f"{service.name} did not listen on {LOOPBACK}:{port} within {timeout:.0f}s; see {service.log_path}")


def _wait_for_log(service: ServiceProcess, needle: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in service.log_path.read_text(errors="replace"):
            return
        if service.process.poll() is not None:
            break
        time.sleep(0.2)
    service.stop()
    raise TimeoutError(f"{service.name} did not log {needle!r} within {timeout:.0f}s; see {service.log_path}")


_STARTERS = {
    "kinesis_mock": start_kinesis_mock,
    "kinesalite": start_kinesalite,
    "dynamodb": start_dynamodb,
    "doris": start_doris,
}


class LocalStack:
    """Starts the chosen services and stops every one of them, whatever happens in between.

    :param state_dir: where logs and ``endpoints.json`` go.
    :param services: names from ``ALL_SERVICES``.
    :param kinesis_shard_limit: kinesis-mock's account-wide shard limit (the scaling benchmark
        raises it).
    """

    def __init__(
        self, state_dir: Path = DEFAULT_STATE_DIR, services: Sequence[str] = ALL_SERVICES, *, kinesis_shard_limit: int = 500
    ) -> None:
        unknown = sorted(set(services) - set(ALL_SERVICES))
        if unknown:
            raise ValueError(f"Unknown services {unknown}; choose from {list(ALL_SERVICES)}")
        self.state_dir = Path(state_dir)
        self.services = tuple(services)
        self.running: dict[str, ServiceProcess] = {}
        self._options: dict[str, dict[str, Any]] = {"kinesis_mock": {"shard_limit": kinesis_shard_limit}}

    @property
    def endpoints_file(self) -> Path:
        return self.state_dir / "endpoints.json"

    def start(self) -> LocalStack:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            for name in self.services:
                self.running[name] = _STARTERS[name](self.state_dir, **self._options.get(name, {}))
                log.info("started %s on %s (pid %s)", name, self.running[name].endpoint, self.running[name].pid)
        except BaseException:
            self.stop()
            raise
        self.endpoints_file.write_text(json.dumps(self.describe(), indent=2))
        return self

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: service.describe() for name, service in self.running.items()}

    def stop(self) -> None:
        for name in reversed(list(self.running)):
            self.running.pop(name).stop()
        with contextlib.suppress(FileNotFoundError):
            self.endpoints_file.unlink()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def local_stack(state_dir: Path = DEFAULT_STATE_DIR, services: Sequence[str] = ALL_SERVICES) -> Iterator[LocalStack]:
    with LocalStack(state_dir, services) as stack:
        yield stack


def stop_recorded(state_dir: Path) -> list[str]:
    """Stop the services recorded in ``state_dir/endpoints.json`` by a previous ``up``."""
    endpoints_file = Path(state_dir) / "endpoints.json"
    if not endpoints_file.exists():
        return []
    recorded = json.loads(endpoints_file.read_text())
    for service in recorded.values():
        stop_pid(int(service["pid"]))
    endpoints_file.unlink()
    return list(recorded)


def airflow_connections(described: Mapping[str, Mapping[str, object]], database: str) -> dict[str, str]:
    """``AIRFLOW_CONN_AWS_DEFAULT`` and ``AIRFLOW_CONN_DORIS_DEFAULT`` for the services in
    ``described`` (``LocalStack.describe()``), as the JSON both majors parse from the environment:
    ``aws`` with kinesis-mock as its ``endpoint_url`` and moto for DynamoDB and STS (when both run),
    and this provider's ``doris`` type with ``database`` as the default database (when the stand-in
    runs)."""
    connections = {}
    if "kinesis_mock" in described and "dynamodb" in described:
        # moto answers STS too: the amazon provider's connection test calls GetCallerIdentity on
        # STS's own endpoint, never on endpoint_url (kinesis-mock, which has no STS).
        moto = {"endpoint_url": described["dynamodb"]["endpoint"]}
        extra = {"region_name": "us-east-1", "endpoint_url": described["kinesis_mock"]["endpoint"],
                 "service_config": {"dynamodb": moto, "sts": moto}}  # fmt: skip
        connections["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(
            {"conn_type": "aws", "login": "local", "password": "local", "extra": extra}
        )
    if "doris" in described:
        doris = described["doris"]
        connections["AIRFLOW_CONN_DORIS_DEFAULT"] = json.dumps(
            {"conn_type": "doris", "host": LOOPBACK, "port": doris["fe_port"], "login": doris["user"],
             "password": doris["password"], "schema": database, "extra": {"query_port": doris["query_port"]}}
        )  # fmt: skip
    return connections


def write_env_file(path: Path, connections: Mapping[str, str]) -> None:
    """``export`` lines a shell can ``source``; readable by the owner only (they hold passwords)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.writelines(f"export {name}={shlex.quote(value)}\n" for name, value in connections.items())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kinesis_doris_devstack.stack",
        description="Start or stop the local stack on 127.0.0.1 (free ports; every service stopped by its PID). "
        "Walk-through from `up` to your own DAG: docs/local-development.md.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{up,down}")
    up = commands.add_parser(
        "up",
        help="start the services and leave them running",
        description="Start the services in the background, print their endpoints as JSON (endpoint, pid, log of "
        "each) and write the Airflow connections aws_default and doris_default to --env-file: "
        "`source` it in the shell that runs Airflow.",
    )
    up.add_argument(
        "--services", nargs="+", default=list(DAG_SERVICES), choices=ALL_SERVICES, metavar="SERVICE",
        help=f"which to start, of {', '.join(ALL_SERVICES)} (default: {' '.join(DAG_SERVICES)}). "
        "kinesis_mock is the Kinesis for your DAGs (resharding, ListShards paging, as AWS); kinesalite is "
        "faster but pages no shard lists, for volume tests only; dynamodb is moto (checkpoints); doris the "
        "Stream Load stand-in",
    )  # fmt: skip
    up.add_argument(
        "--node-modules", type=Path, metavar="DIR",
        help="the node_modules folder holding kinesis-local and kinesalite (from `npm ci` in the checkout); "
        "default: $KINESIS_DORIS_NODE_MODULES, else the nearest node_modules above the working directory "
        "or this package",
    )  # fmt: skip
    up.add_argument("--database", default="demo", help="the default database (schema) of doris_default (default: demo)")
    for command in (up, commands.add_parser(
        "down", help="stop what `up` started", description="Stop, by PID, the services `up` recorded in "
        "STATE_DIR/endpoints.json; print the names stopped as JSON and remove the env file.",
    )):  # fmt: skip
        command.add_argument(
            "--state-dir", type=Path, default=DEFAULT_STATE_DIR,
            help=f"where endpoints.json and the services' logs are (default: {DEFAULT_STATE_DIR})",
        )  # fmt: skip
        command.add_argument(
            "--env-file", type=Path, metavar="PATH",
            help=f"the AIRFLOW_CONN_* exports and AIRFLOW__CORE__TEST_CONNECTION (mode 0600); default: STATE_DIR/{ENV_FILE_NAME}",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    env_file = args.env_file or args.state_dir / ENV_FILE_NAME
    if args.command == "down":
        stopped = stop_recorded(args.state_dir)
        env_file.unlink(missing_ok=True)
        print(json.dumps({"stopped": stopped}))
        return 0
    if args.node_modules:
        os.environ["KINESIS_DORIS_NODE_MODULES"] = str(args.node_modules)
    stack = LocalStack(args.state_dir, args.services).start()
    # Detach: the children outlive this command until `down` stops them by PID.
    write_env_file(env_file, {**airflow_connections(stack.describe(), args.database), **CONNECTION_TESTS_ON})
    log.info("Airflow connections written to %s; run: source %s", env_file, shlex.quote(str(env_file)))
    print(stack.endpoints_file.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
