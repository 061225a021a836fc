"""``make demo``: a pipeline's life on the local stack, driven through Airflow, in a few minutes.

1. Start kinesis-mock, moto (DynamoDB) and the Doris stand-in on 127.0.0.1, and an Airflow home
   with a SQLite database in ``.demo/airflow``.
2. Create a 4-shard stream and the table ``demo.events``, and start the reshard watch DAG
   (``airflow dags test kinesis_reshard_watch_example``) in the background.
3. Produce JSON events in real time over six intervals, a few of them malformed. Halfway through,
   split one shard and merge two; the watch sees it, rebalances and signals the loader.
4. Run the example loader DAG (``dag.test()``, what ``airflow dags test`` runs) for each interval
   as soon as it is sealed, then replay every interval.
5. Print a report that checks the table against what was produced: rows equal valid events, every
   malformed event is dead-lettered, no duplicates; and each shard's state and lag.

Everything it starts is stopped by PID on exit, on Ctrl-C and on failure. Logs stay in
``.demo/logs``, the report in ``.demo/report.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import select
import signal
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import pymysql

from airflow_provider_kinesis_doris.core.audit import AuditTarget, audit
from airflow_provider_kinesis_doris.core.stores.dynamodb import dynamo_store
from airflow_provider_kinesis_doris.core.stores.items import ShardCheckpoint
from airflow_provider_kinesis_doris.core.doris.client import DorisStreamLoadClient
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from kinesis_doris_devstack.scenario import (
    create_stream,
    event,
    events_table_ddl,
    merge,
    now_ms,
    put_events,
    put_records,
    split,
    wait_past,
)
from kinesis_doris_devstack.stack import LocalStack, ServiceProcess, airflow_connections, local_client, stop_pid

REPO_ROOT = Path(__file__).resolve().parents[2]
STREAM = "demo-events"
DATABASE = "demo"
TABLE = "events"
CHECKPOINT_TABLE = "kinesis_doris_checkpoints"
PIPELINE_ID = f"{STREAM}.{DATABASE}.{TABLE}"
LOADER_DAG = "kinesis_to_doris_example"
WATCH_DAG = "kinesis_reshard_watch_example"
# Records that cannot become rows: the loader must dead-letter each of them, never drop one.
MALFORMED = (b'{"event_id": 7, "user_id": "trunc', b"not json at all", b'{"user_id": "no-event-id", "amount": 3}')


@dataclass(frozen=True)
class DemoSettings:
    """How much the demo does; the defaults finish in a few minutes on two cores."""

    state_dir: Path = Path(".demo")
    interval_seconds: int = 10
    intervals: int = 6
    events_per_interval: int = 500
    malformed_every: int = 120
    use_spark: bool = True
    step_timeout_seconds: float = 300.0

    @property
    def reshard_interval(self) -> int:
        return self.intervals // 2


class DemoFailed(RuntimeError):
    """A step of the demo failed; the message says which and where its log is."""


class Progress:
    """Numbered progress lines with the time since the start, on the terminal even while a
    DAG run's own output goes to a log file."""

    def __init__(self, total_steps: int) -> None:
        self.total = total_steps
        self.done = 0
        self.started = time.monotonic()
        self._out: IO[str] = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
        self._lock = threading.Lock()

    def step(self, message: str) -> None:
        with self._lock:
            self.done += 1
            self._print(f"[{self.done:2d}/{self.total}] {message}")

    def note(self, message: str) -> None:
        with self._lock:
            self._print(f"        {message}")

    def _print(self, line: str) -> None:
        elapsed = time.monotonic() - self.started
        self._out.write(f"{int(elapsed // 60):02d}:{int(elapsed % 60):02d} {line}\n")


@dataclass
class Produced:
    """What the producer put on the stream, to check the table against: valid events carry the
    ids ``0 .. valid - 1``."""

    valid: int = 0
    malformed: int = 0

    @property
    def events(self) -> int:
        return self.valid + self.malformed


class Producer(threading.Thread):
    """Puts each interval's events in small batches spread over it, in real time (arrival
    stamps decide the interval), and reshards halfway through the middle interval."""

    def __init__(self, kinesis: Any, settings: DemoSettings, bounds: Sequence[int], progress: Progress) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self.kinesis = kinesis
        self.settings = settings
        self.bounds = bounds
        self.progress = progress
        self.produced = Produced()
        self.sealed = [threading.Event() for _ in range(settings.intervals)]
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for index in range(self.settings.intervals):
                self._produce_interval(index)
                self.sealed[index].set()
        except BaseException as error:  # handed to the main thread by wait_sealed
            self.error = error
            for sealed in self.sealed:
                sealed.set()

    def wait_sealed(self, index: int) -> None:
        if not self.sealed[index].wait(timeout=self.settings.step_timeout_seconds):
            raise DemoFailed(f"the producer did not finish interval {index + 1}")
        if self.error is not None:
            raise DemoFailed(f"producing events failed: {self.error!r}") from self.error

    def _produce_interval(self, index: int) -> None:
        start, end = self.bounds[index], self.bounds[index + 1]
        batches = 10
        for batch in range(batches):
            wait_past(start + (end - start) * batch // batches)
            if self.stopping.is_set():
                return
            if index == self.settings.reshard_interval and batch == batches // 2:
                self._reshard()
            self._put_batch(self.settings.events_per_interval // batches)
        wait_past(end)
        self.progress.step(
            f"interval {index + 1}/{self.settings.intervals} ({_clock(start)}–{_clock(end)}) produced: "
            f"{self.produced.events} events so far, {self.produced.malformed} malformed"
        )

    def _put_batch(self, count: int) -> None:
        events, malformed = [], []
        for _ in range(count):
            if (self.produced.events + 1) % self.settings.malformed_every == 0:
                malformed.append(MALFORMED[self.produced.malformed % len(MALFORMED)])
                self.produced.malformed += 1
            else:
                events.append(event(self.produced.valid))
                self.produced.valid += 1
        put_events(self.kinesis, STREAM, events)
        put_records(self.kinesis, STREAM, ((f"bad-{i}", data) for i, data in enumerate(malformed)))

    def _reshard(self) -> None:
        """Split the first shard in two and merge the last two (adjacent hash ranges)."""
        first, _, third, fourth = (shard["ShardId"] for shard in self.kinesis.list_shards(StreamName=STREAM)["Shards"])
        split(self.kinesis, STREAM, first)
        merge(self.kinesis, STREAM, third, fourth)
        self.progress.note(f"resharded: split {first}, merged {third} + {fourth}")


class LoaderRuns:
    """The demo's side of :func:`serve_loader_runs`: one Airflow process runs every loader run,
    so Airflow and Spark start once, not once per interval."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def run(self, interval_end: datetime, timeout: float) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(f"{interval_end.isoformat()}\n".encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            reply = "the loader process exited"
        else:
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            reply = self.process.stdout.readline().decode().strip() if ready else f"no answer within {timeout:.0f} s"
        if reply != "success":
            raise DemoFailed(
                f"the loader run for the interval ending {interval_end:%H:%M:%S} ended: {reply or 'the loader process exited'}; "
                f"see {self.log_path}"
            )


def serve_loader_runs() -> int:
    """Run the example loader DAG with ``dag.test()`` for each interval end read from stdin; answer
    each with its run's state on stdout. Airflow's and Spark's output go to stderr (the log)."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    with contextlib.suppress(ImportError):
        import airflow.providers.fab.auth_manager.models  # noqa: F401 - 2.x: dag.test needs FAB's ab_user
    spec = importlib.util.spec_from_file_location("kd_demo_loader_dag", REPO_ROOT / "dags" / f"{LOADER_DAG}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    for line in sys.stdin:
        end = datetime.fromisoformat(line.strip())
        dag_run = module.dag.test(logical_date=end) if AIRFLOW_V_3_0_PLUS else module.dag.test(execution_date=end)
        replies.write(f"{getattr(dag_run.state, 'value', dag_run.state)}\n")
    return 0


class Demo:
    """The walk-through of the module docstring."""

    def __init__(self, settings: DemoSettings) -> None:
        self.settings = settings
        self.state_dir = settings.state_dir.resolve()
        self.log_dir = self.state_dir / "logs"
        self.progress = Progress(total_steps=4 + 3 * settings.intervals)
        self._children: list[subprocess.Popen[bytes]] = []

    def run(self) -> dict[str, Any]:
        for folder in ("airflow", "logs", "stack"):
            shutil.rmtree(self.state_dir / folder, ignore_errors=True)
        self.log_dir.mkdir(parents=True)
        with LocalStack(self.state_dir / "stack", services=["kinesis_mock", "dynamodb", "doris"]) as stack:
            self.progress.step(
                "local stack up: " + ", ".join(f"{name} {svc.endpoint}" for name, svc in stack.running.items())
            )
            self._connect(stack.running)
            try:
                return self._walk_through()
            finally:
                for child in self._children:
                    stop_pid(child.pid)  # its whole group: the watch's task processes too
                self.doris.close()

    # -- setting up -----------------------------------------------------------------------------

    def _connect(self, running: dict[str, ServiceProcess]) -> None:
        """Clients for the report, and the Airflow environment of the example DAGs."""
        kinesis_url, dynamodb_url = running["kinesis_mock"].endpoint, running["dynamodb"].endpoint
        doris = running["doris"].extra
        self.kinesis = local_client("kinesis", kinesis_url)
        self.producer_kinesis = local_client("kinesis", kinesis_url)
        self.store = dynamo_store(local_client("dynamodb", dynamodb_url), CHECKPOINT_TABLE, PIPELINE_ID)
        self.doris = DorisStreamLoadClient(
            DorisConnectionConfig(host="127.0.0.1", port=int(doris["fe_port"]), user=str(doris["user"]),
                                  password=str(doris["password"]))
        )  # fmt: skip
        self.doris_mysql = {"host": "127.0.0.1", "port": int(doris["query_port"]), "user": str(doris["user"]),
                            "password": str(doris["password"]), "database": DATABASE}  # fmt: skip
        # Set in this process too, before Airflow is imported: the loader DAG runs in-process.
        os.environ.update(
            {
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "AIRFLOW_HOME": str(self.state_dir / "airflow"),
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "False",
                # Connections as environment variables: never on a command line, never in the DB.
                **airflow_connections({name: svc.describe() for name, svc in running.items()}, DATABASE),
                "KD_EXAMPLE_STREAM": STREAM,
                "KD_EXAMPLE_TABLE": f"{DATABASE}.{TABLE}",
                "KD_EXAMPLE_CHECKPOINT_TABLE": CHECKPOINT_TABLE,
                "KD_EXAMPLE_INTERVAL_SECONDS": str(self.settings.interval_seconds),
                "KD_EXAMPLE_SEAL_GRACE_SECONDS": "0",
                "KD_EXAMPLE_USE_SPARK": str(self.settings.use_spark).lower(),
                "KD_EXAMPLE_SPARK_MASTER": "local[2]",
                "KD_RESHARD_POKE_SECONDS": "2",
                "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
            }
        )

    def _airflow(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Start ``airflow *args``, output to its own log."""
        return self._python(name, "-m", "airflow", *args)

    def _python(self, name: str, *args: str, talk: bool = False) -> tuple[subprocess.Popen[bytes], Path]:
        """Start ``python *args`` in its own session (Ctrl-C reaches only the demo, which then
        stops the whole group: task processes, Spark's JVM and its Python workers). Its output
        goes to its own log, except stdout when the demo ``talk``s with it over stdin/stdout."""
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(  # noqa: S603 - fixed argv, built here
                [sys.executable, *args],
                stdin=subprocess.PIPE if talk else subprocess.DEVNULL,
                stdout=subprocess.PIPE if talk else log_file,
                stderr=log_file,
                start_new_session=True,
            )
        self._children.append(process)
        return process, log_path

    def _wait(self, process: subprocess.Popen[bytes], log_path: Path, what: str) -> None:
        try:
            code = process.wait(timeout=self.settings.step_timeout_seconds)
        except subprocess.TimeoutExpired as expired:
            raise DemoFailed(f"{what} did not finish within {self.settings.step_timeout_seconds:.0f} s; see {log_path}") from expired
        if code != 0:
            raise DemoFailed(f"{what} exited with {code}; see {log_path}")

    # -- the walk-through -----------------------------------------------------------------------

    def _walk_through(self) -> dict[str, Any]:
        self._wait(*self._airflow("airflow-db-migrate", "db", "migrate"), "airflow db migrate")
        # Registers the DAGs, as a dag processor would: Airflow 2.11's trigger of the loader needs it.
        self._wait(*self._airflow("airflow-dags-reserialize", "dags", "reserialize"), "airflow dags reserialize")
        shards = create_stream(self.kinesis, STREAM, 4)
        self.doris.run_sql("information_schema", f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        self.doris.run_sql(DATABASE, events_table_ddl(TABLE))
        self.store.items.create_table_if_missing()
        self.progress.step(
            f"Airflow home {os.environ['AIRFLOW_HOME']}; stream {STREAM} ({len(shards)} shards); "
            f"table {DATABASE}.{TABLE}; checkpoint table {CHECKPOINT_TABLE}"
        )
        watch = self._start_watch()
        seconds = self.settings.interval_seconds
        first = (now_ms() // 1000 // seconds + 1) * seconds
        bounds = [(first + i * seconds) * 1000 for i in range(self.settings.intervals + 1)]
        producer = Producer(self.producer_kinesis, self.settings, bounds, self.progress)
        producer.start()
        loader = LoaderRuns(*self._python("loader-dag-test", "-m", "kinesis_doris_devstack.demo", "--serve-loader-runs", talk=True))
        try:
            for index in range(self.settings.intervals):
                producer.wait_sealed(index)
                self._run_loader(loader, bounds, index, "loaded")
                if index == self.settings.reshard_interval:
                    self._finish_watch(*watch)
            for index in range(self.settings.intervals):
                self._run_loader(loader, bounds, index, "replayed")
        finally:
            producer.stopping.set()
        return self._report(producer.produced, self._audit(bounds[0], bounds[-1]))

    def _start_watch(self) -> tuple[subprocess.Popen[bytes], Path]:
        """Start the watch DAG and wait for its first look, which stores the shard set it will
        compare against."""
        process, log_path = self._airflow("reshard-watch", "dags", "test", WATCH_DAG)
        deadline = time.monotonic() + self.settings.step_timeout_seconds
        while self.store.ledger.get_topology() is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise DemoFailed(f"the reshard watch never took its first look; see {log_path}")
            time.sleep(0.5)
        self.progress.step(f"`airflow dags test {WATCH_DAG}` is watching the shards")
        return process, log_path

    def _finish_watch(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self._wait(process, log_path, f"`airflow dags test {WATCH_DAG}`")
        topology = self.store.ledger.get_topology()
        assert topology is not None, "the watch stored the topology before"
        self.progress.step(
            f"reshard watch saw the change and rebalanced: topology v{topology.version} with "
            f"{len(topology.shard_ids)} shards; loader signalled"
        )

    def _run_loader(self, loader: LoaderRuns, bounds: Sequence[int], index: int, verb: str) -> None:
        started = time.monotonic()
        loader.run(datetime.fromtimestamp(bounds[index + 1] / 1000, tz=timezone.utc), self.settings.step_timeout_seconds)
        rows = self._count(f"SELECT COUNT(*) FROM {TABLE}")
        self.progress.step(
            f"interval {index + 1} {verb} by {LOADER_DAG} in {time.monotonic() - started:.0f} s: {rows} rows in Doris"
        )

    # -- the report -----------------------------------------------------------------------------

    def _count(self, query: str) -> int:
        return int(self.doris.run_sql(DATABASE, query).rows[0][0])

    def _audit(self, start_ms: int, end_ms: int) -> dict[str, Any]:
        """``core.audit`` of every interval the demo loaded, as the DAG's audit task checks each:
        through the MySQL protocol, as a user's Airflow runs it."""
        connection = pymysql.connect(**self.doris_mysql)

        def run_sql(statement: str) -> Sequence[Sequence[Any]]:
            with connection.cursor() as cursor:
                cursor.execute(statement)
                return cursor.fetchall()

        try:
            target = AuditTarget(DATABASE, TABLE, STREAM, f"{TABLE}_dead_letter")
            return audit(self.store, run_sql, target, start_ms, end_ms).summary()
        finally:
            connection.close()

    def _report(self, produced: Produced, audited: dict[str, Any]) -> dict[str, Any]:
        rows, distinct, low, high = (
            int(value) for value in self.doris.run_sql(
                DATABASE, f"SELECT COUNT(*), COUNT(DISTINCT event_id), MIN(event_id), MAX(event_id) FROM {TABLE}"
            ).rows[0]
        )  # fmt: skip
        valid = produced.valid  # ids 0 .. valid-1, so count, distinct and range prove the set
        report = {
            "events_produced": produced.events,
            "valid_events": valid,
            "malformed_events": produced.malformed,
            "rows_in_doris": rows,
            "dead_lettered": self._count(f"SELECT COUNT(*) FROM {TABLE}_dead_letter"),
            "duplicates": rows - distinct,
            "every_valid_event_once": (rows, distinct, low, high) == (valid, valid, 0, valid - 1),
            "shards": [_shard_row(checkpoint) for checkpoint in self.store.ledger.list_shard_checkpoints()],
            "audit": audited,
        }
        report["ok"] = (
            report["every_valid_event_once"] and report["duplicates"] == 0 and report["dead_lettered"] == produced.malformed
            and audited["ok"]
        )
        (self.state_dir / "report.json").write_text(json.dumps(report, indent=2))
        return report


def _shard_row(checkpoint: ShardCheckpoint) -> dict[str, Any]:
    mark = checkpoint.high_water_mark
    return {
        "shard_id": checkpoint.shard_id,
        "parents": list(checkpoint.parent_ids),
        "state": checkpoint.state.value,
        "loaded_up_to": _clock(mark.instant_ms) if mark is not None else None,
        "lag_ms": checkpoint.last_lag_ms,
    }


def _clock(instant_ms: int) -> str:
    return datetime.fromtimestamp(instant_ms / 1000, tz=timezone.utc).strftime("%H:%M:%S")


PIPELINE_PAGE = f"http://127.0.0.1:8080/kinesis-doris/pipelines/{LOADER_DAG}/load_interval"
"""The loader's page (``airflow_provider_kinesis_doris.ui``) in an API server on the default port."""


def print_report(report: dict[str, Any], airflow_home: Path | None = None) -> None:
    print("\nReport")
    for key in ("events_produced", "valid_events", "malformed_events", "rows_in_doris", "dead_lettered", "duplicates"):
        print(f"  {key.replace('_', ' '):<24} {report[key]}")
    print(f"  {'every valid event once':<24} {'yes' if report['every_valid_event_once'] else 'NO'}")
    audited = report["audit"]
    verdict = f"every record once ({audited['ranges']} shard ranges, {audited['rows_found']} rows)" if audited["ok"] else (
        f"{audited['differences']} difference(s): " + "; ".join(audited["first_differences"][:3])
    )  # fmt: skip
    print(f"  {'audit':<24} {verdict}, over {audited['span']}")
    print(f"\n  {'shard':<22} {'parents':<44} {'state':<8} {'loaded up to':<13} lag at last read")
    for shard in report["shards"]:
        lag = "-" if shard["lag_ms"] is None else f"{shard['lag_ms'] / 1000:.1f} s"
        parents = ", ".join(shard["parents"]) or "-"
        print(f"  {shard['shard_id']:<22} {parents:<44} {shard['state']:<8} {shard['loaded_up_to'] or '-':<13} {lag}")
    # The demo runs no API server (dag.test() needs none); the page is one command away, on Airflow 3.1+.
    serve = f"AIRFLOW_HOME={airflow_home} " if airflow_home else ""
    print(f"\n  pipeline page            {PIPELINE_PAGE}")
    print(f"  {'':<24} (Airflow 3.1+, after `{serve}{Path(sys.executable).parent}/airflow api-server --port 8080`)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=DemoSettings.state_dir, help="logs, Airflow home, report")
    parser.add_argument("--events-per-interval", type=int, default=DemoSettings.events_per_interval)
    parser.add_argument("--interval-seconds", type=int, default=DemoSettings.interval_seconds)
    parser.add_argument("--no-spark", action="store_true", help="load in the task's process instead of Spark local[2]")
    parser.add_argument("--serve-loader-runs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_loader_runs:
        return serve_loader_runs()
    # Ctrl-C and `kill` both go through the clean-up of everything the demo started (SIGINT too:
    # a shell starts background jobs with it ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    settings = DemoSettings(
        state_dir=args.state_dir, events_per_interval=args.events_per_interval,
        interval_seconds=args.interval_seconds, use_spark=not args.no_spark,
    )  # fmt: skip
    try:
        report = Demo(settings).run()
    except KeyboardInterrupt:
        print("\ninterrupted: everything the demo started is stopped", file=sys.stderr)
        return 130
    except DemoFailed as failure:
        print(f"\ndemo failed: {failure}", file=sys.stderr)
        return 1
    print_report(report, settings.state_dir / "airflow")
    verdict = "OK" if report["ok"] else "MISMATCH"
    print(f"\n{verdict}: report in {settings.state_dir / 'report.json'}, logs in {settings.state_dir / 'logs'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
