"""Airflow's own processes for the end-to-end tests (backfills, a paused DAG), on loopback, stopped by their PIDs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from kinesis_doris_devstack.stack import free_port, stop_pid


def airflow_cli(*args: str, env: Mapping[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``airflow <args>`` with this interpreter's Airflow; fail with its output."""
    result = subprocess.run(
        [sys.executable, "-m", "airflow", *args], env=dict(env), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


@contextlib.contextmanager
def airflow3_services(env: Mapping[str, str], log_dir: Path) -> Iterator[dict[str, str]]:
    """api-server (Execution API), scheduler, dag-processor and triggerer of Airflow 3; log
    servers are skipped so nothing listens beyond the api-server on 127.0.0.1."""
    port = free_port()
    env = {
        **env,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__PARALLELISM": "4",
        # Only the DAG a test unpauses runs; the other example DAGs stay quiet.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }
    commands = {
        "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
        "triggerer": ["triggerer", "--skip-serve-logs"],
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    stopping = threading.Event()

    def start(name: str) -> None:
        with open(log_dir / f"{name}.log", "ab") as log:
            processes[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", *commands[name]], env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def supervise() -> None:
        # As a deployment's process manager does: Airflow 3.3's scheduler exits on a StaleDataError
        # when `airflow backfill create` reprocesses runs it is updating (SQLite), and every test
        # that waits for runs would then wait for ever.
        while not stopping.wait(1):
            for name in ("scheduler", "dag-processor", "triggerer"):
                if processes[name].poll() is not None and not stopping.is_set():
                    start(name)

    watcher = threading.Thread(target=supervise, name="airflow-services", daemon=True)
    try:
        for name in commands:
            start(name)
        _wait_healthy(f"http://127.0.0.1:{port}/api/v2/monitor/health", processes["api-server"], timeout=120)
        watcher.start()
        yield env
    finally:
        stopping.set()
        if watcher.is_alive():
            watcher.join(5)
        for process in reversed(list(processes.values())):
            stop_pid(process.pid, timeout=15)


@contextlib.contextmanager
def airflow2_services(env: Mapping[str, str], log_dir: Path) -> Iterator[dict[str, str]]:
    """The scheduler of Airflow 2.11, which parses the DAG files itself. The suite's metadata DB is
    SQLite, where 2.11 runs only the SequentialExecutor: one task at a time, each an ``airflow
    tasks run`` started from PATH. No triggerer (tasks wait for their seal by rescheduling unless
    deferrable) and no log server, so nothing listens."""
    env = {
        **env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        # Only the DAG a test unpauses runs; the other example DAGs stay quiet.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__EXECUTOR": "SequentialExecutor",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
    }
    with open(log_dir / "scheduler.log", "wb") as log:
        scheduler = subprocess.Popen(
            [sys.executable, "-m", "airflow", "scheduler", "--skip-serve-logs"], env=env, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_scheduler_alive(env, scheduler, log_dir / "scheduler.log", timeout=120)
        yield env
    finally:
        stop_pid(scheduler.pid, timeout=15)


def _wait_scheduler_alive(env: Mapping[str, str], scheduler: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Until the scheduler's job heartbeats (its first loop has run)."""
    deadline = time.monotonic() + timeout
    check = [sys.executable, "-m", "airflow", "jobs", "check", "--job-type", "SchedulerJob", "--local", "--limit", "1"]
    while time.monotonic() < deadline:
        assert scheduler.poll() is None, f"the scheduler exited while starting; its log: {log}"
        if subprocess.run(check, env=dict(env), capture_output=True, timeout=120).returncode == 0:
            return
        time.sleep(1)
    raise TimeoutError(f"the scheduler did not heartbeat within {timeout:.0f}s; its log: {log}")


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the api-server exited while starting"
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")
