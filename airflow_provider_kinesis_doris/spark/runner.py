"""Where the Spark job runs: in this process (local mode or a Spark Connect remote), or through
``spark-submit`` against a master URL. Both return the same range reports.

The job and credentials travel as files (0600, in a private temporary folder), so no secret is
ever on a command line or in a Spark plan (invariant I8). The folder never outlives the run that
made it, even a SIGKILLed one: a small reaper process removes it as soon as the run's process is
gone, and the next run on the machine removes any folder whose owner died with its reaper.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.load_job import Credentials, LoadJob
from airflow_provider_kinesis_doris.core.load import RangeReport, raise_first_failure

log = logging.getLogger(__name__)

_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    # One Python worker per task slot, reused across jobs: the fixed cost is process start-up.
    "spark.python.worker.reuse": "true",
    # The progress bar redraws stderr several times a second: noise in task logs.
    "spark.ui.showConsoleProgress": "false",
}
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options of a local-mode session (driver and executor in one JVM), unless the job's conf
sets ``spark.driver.extraJavaOptions``: the JVM only schedules the Python workers, which do all
the reading and loading, so the optimizing compiler and a parallel collector cost CPU (about 5
CPU-seconds a run, ``docs/benchmarks.md``) for no work they speed up."""


@dataclass(frozen=True)
class SparkSettings:
    """How to run the job.

    :param master: ``local[*]`` (default), ``local[N]``, ``spark://host:port``, ``yarn``, ...
    :param remote: a Spark Connect URL (``sc://host:15002``); runs in-process through Connect.
    :param submit: run through ``spark-submit`` instead of in this process.
    :param conf: Spark configuration (``spark.executor.memory``, ...).
    :param python: interpreter for executors (``PYSPARK_PYTHON``); default: this one.
    :param spark_home: where ``bin/spark-submit`` is; default: the installed pyspark package.
    :param py_files: extra files for ``--py-files`` (e.g. a zip of this package when executors do
        not have it installed).
    """

    master: str = "local[*]"
    remote: str | None = None
    submit: bool = False
    conf: Mapping[str, str] = field(default_factory=dict)
    python: str | None = None
    spark_home: str | None = None
    py_files: Sequence[str] = ()


MIN_JAVA = 17
"""Spark 4 runs on Java 17 and newer."""
_INSTALL_HINT = (
    "install the provider with its spark extra (pip install 'airflow-provider-kinesis-doris[spark]') and a "
    f"Java {MIN_JAVA}+ runtime, or load without Spark (use_spark=False, or 'auto' for small intervals)"
)


def check_prerequisites(settings: SparkSettings) -> None:
    """Fail before any work when this process cannot start the Spark job: PySpark must import,
    and, unless the job goes to Spark Connect, a Java of version ``MIN_JAVA`` or newer must be
    where PySpark's launcher looks (``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``).

    :raises ConfigurationError: naming what is missing and how to install it.
    """
    if importlib.util.find_spec("pyspark") is None:
        raise ConfigurationError(f"Loading with Spark needs PySpark, which this Python cannot import: {_INSTALL_HINT}")
    if settings.remote:
        return
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    where = f"JAVA_HOME={java_home}" if java_home else "PATH"
    if java is None or not os.access(java, os.X_OK):
        raise ConfigurationError(f"Loading with Spark needs Java {MIN_JAVA}+; there is none on {where}: {_INSTALL_HINT}")
    version = java_version(java)
    if version is None or version < MIN_JAVA:
        found = f"Java {version}" if version is not None else "a java that does not say its version"
        raise ConfigurationError(f"Loading with Spark needs Java {MIN_JAVA}+; {java} (from {where}) is {found}: {_INSTALL_HINT}")


@functools.cache
def java_version(java: str) -> int | None:
    """The major version ``java -version`` reports (``1.8`` is 8), or None."""
    try:
        completed = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    except OSError:
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', completed.stderr + completed.stdout)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def run_spark_job(job: LoadJob, credentials: Credentials, settings: SparkSettings) -> list[RangeReport]:
    """Write the job's files, run it as ``settings`` say, and return one report per range.

    Empty ranges never get here: ``core.pipeline.run_interval`` settles them on the driver.

    :raises ConfigurationError: PySpark or Java is missing (``check_prerequisites``).
    :raises KinesisDorisError: a range failed on an executor; raised as its own class.
    """
    check_prerequisites(settings)
    with private_folder() as folder:
        credentials_file = folder / "credentials.json"
        credentials.write(str(credentials_file))
        job = replace(job, credentials_file=str(credentials_file))
        reports = _submit(job, settings, folder) if settings.submit else _in_process(job, settings)
    raise_first_failure(reports)
    return reports


def _in_process(job: LoadJob, settings: SparkSettings) -> list[RangeReport]:
    from pyspark.sql import SparkSession

    from airflow_provider_kinesis_doris.spark.job import run_job

    os.environ.setdefault("PYSPARK_PYTHON", settings.python or sys.executable)
    builder = SparkSession.builder.appName(f"kinesis-to-doris:{job.pipeline.pipeline_id}")
    builder = builder.remote(settings.remote) if settings.remote else builder.master(settings.master)
    for key, value in _session_conf(settings).items():
        builder = builder.config(key, value)
    # The session is kept for the next job of this process: starting one costs 4-8 s.
    spark = builder.getOrCreate()
    return run_job(spark, job)


_LOCAL_CONF = {
    "spark.driver.extraJavaOptions": LOCAL_DRIVER_JAVA_OPTIONS,
    # The driver's RPC endpoint and block manager listen on the host's address by default: a
    # local-mode job has no peer to serve, so they listen on loopback only.
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def _session_conf(settings: SparkSettings) -> dict[str, str]:
    """Spark's settings for ``settings``: ours, then for a local master the local ones, then the
    user's (which win)."""
    local = not settings.remote and settings.master.startswith("local")
    return {**_DEFAULT_CONF, **(_LOCAL_CONF if local else {}), **settings.conf}


def _submit(job: LoadJob, settings: SparkSettings, folder: Path) -> list[RangeReport]:
    job_file, report_file = folder / "job.json", folder / "reports.json"
    job_file.write_text(job.to_json())
    python = settings.python or sys.executable
    command = submit_command(job, settings, job_file, report_file)
    log.info("spark-submit to %s: %d ranges in %d partitions", settings.master, len(job.ranges), len(job.groups))
    env = {**os.environ, "PYSPARK_PYTHON": python, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)  # noqa: S603
    for line in completed.stderr.splitlines()[-40:]:
        log.info("spark-submit: %s", line)
    if completed.returncode != 0:
        raise RuntimeError(f"spark-submit to {settings.master} failed with exit code {completed.returncode}; see the log above")
    return [RangeReport(**entry) for entry in json.loads(report_file.read_text())]


def submit_command(job: LoadJob, settings: SparkSettings, job_file: Path, report_file: Path) -> list[str]:
    """The ``spark-submit`` command line for ``job``: paths and settings, never a secret (I8).

    The credentials file goes with ``--files``: an executor on another host finds it with
    ``SparkFiles`` (``spark/source.py``), where the driver's path does not exist.
    """
    command = [
        str(Path(settings.spark_home or _pyspark_home()) / "bin" / "spark-submit"),
        "--master", settings.master,
        "--conf", f"spark.pyspark.python={settings.python or sys.executable}",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
    ]  # fmt: skip
    for key, value in _session_conf(settings).items():
        command += ["--conf", f"{key}={value}"]
    if job.credentials_file:
        command += ["--files", job.credentials_file]
    if settings.py_files:
        command += ["--py-files", ",".join(settings.py_files)]
    return [*command, _job_script(), "--job-file", str(job_file), "--report-file", str(report_file)]


def _job_script() -> str:
    from airflow_provider_kinesis_doris.spark import job

    return job.__file__


def _pyspark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


_FOLDER_PREFIX = "kinesis-doris-"
_OWNER_FILE = "owner"
# Runs in its own session, so a kill of the task's process group spares it. It holds the read end
# of a pipe whose only write end is the run's: EOF comes when the run closes it or dies, however.
_REAPER = "import shutil, sys\nsys.stdin.buffer.read()\nshutil.rmtree(sys.argv[1], ignore_errors=True)\n"


@contextmanager
def private_folder() -> Iterator[Path]:
    """A folder only this user can read (0700), removed when the block ends or this process dies.

    Entering it first removes the folders of runs on this host whose process is gone (their
    reaper was killed with them, e.g. a whole container or cgroup).
    """
    _remove_orphaned_folders()
    folder = Path(tempfile.mkdtemp(prefix=_FOLDER_PREFIX))  # created 0700
    (folder / _OWNER_FILE).write_text(_owner_tag(os.getpid()))
    reaper = subprocess.Popen(  # noqa: S603
        [sys.executable, "-c", _REAPER, str(folder)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        assert reaper.stdin is not None
        reaper.stdin.close()
        reaper.wait()


def _owner_tag(pid: int) -> str:
    # The host name keeps a run from judging the processes of another host sharing the folder.
    return f"{socket.gethostname()} {pid}"


def _remove_orphaned_folders() -> None:
    for folder in Path(tempfile.gettempdir()).glob(f"{_FOLDER_PREFIX}*"):
        try:
            if folder.stat().st_uid != os.getuid():
                continue
            host, _, pid = (folder / _OWNER_FILE).read_text().partition(" ")
        except OSError:
            continue  # not ours, or still being created (no owner yet)
        if host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
            log.info("removing %s, left by run %s that was killed", folder, pid)
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
