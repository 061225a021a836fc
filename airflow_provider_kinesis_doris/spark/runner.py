"""Where the Spark job runs: in this process (local mode, a cluster's master, or a Spark Connect
remote), or through ``spark-submit`` by a ``Submitter`` (the operator's uses the apache-spark
provider's ``SparkSubmitHook``). Both return the same range reports.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.value_checks import check_local_master
from airflow_provider_kinesis_doris.core.report import RangeReport, raise_first_failure

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
class Submission:
    """One ``spark-submit`` of the load job, for a ``Submitter`` to send (the operator's, through the
    apache-spark provider's ``SparkSubmitHook`` and its ``spark`` connection).

    Paths and settings only, never a secret (I8): credentials travel in ``files`` and the Spark
    authentication secret in ``properties_file``, both 0600.

    :param application: the job script (``spark/job.py``).
    :param application_args: its arguments: the job file to read, the report file to write.
    :param conf: Spark configuration (``--conf``).
    :param files: files for ``--files``; executors find them with ``SparkFiles``.
    :param py_files: files for ``--py-files``.
    :param name: the application's name.
    :param properties_file: a 0600 properties file holding ``spark.authenticate.secret``, if any.
    """

    application: str
    application_args: tuple[str, ...]
    conf: Mapping[str, str]
    files: tuple[str, ...]
    py_files: tuple[str, ...]
    name: str
    properties_file: str | None = None


Submitter = Callable[[Submission], None]
"""Runs a submission to its end; raises if ``spark-submit`` failed."""


@dataclass(frozen=True)
class SparkSettings:
    """How to run the job.

    :param master: ``local[*]`` (default) or ``local[N]``: Spark in this process. A cluster is
        reached through ``submitter`` (or ``remote``), which ship the credentials file to its
        executors and keep the authentication secret off command lines.
    :param remote: a Spark Connect URL (``sc://host:15002``); runs in-process through Connect.
    :param submitter: run through ``spark-submit`` with this instead of in this process.
    :param conf: Spark configuration (``spark.executor.memory``, ...).
    :param python: interpreter for executors (``PYSPARK_PYTHON``); default: this one.
    :param py_files: extra files for ``--py-files`` (e.g. a zip of this package when executors do
        not have it installed).
    :param auth_secret: with ``submitter``: the cluster's ``spark.authenticate`` secret; the job is
        then submitted with authentication on, the secret in a 0600 properties file.
    """

    master: str = "local[*]"
    remote: str | None = field(default=None, repr=False)  # may carry a Spark Connect token
    submitter: Submitter | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    python: str | None = None
    py_files: Sequence[str] = ()
    auth_secret: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        check_local_master("master", self.master)


MIN_JAVA = 17
"""Spark 4 runs on Java 17 and newer."""
_INSTALL_HINT = (
    "install the provider with its spark extra (pip install 'airflow-provider-kinesis-doris[spark]') and a "
    f"Java {MIN_JAVA}+ runtime, or load without Spark (runner=InProcessRunner(), or SparkOrInProcess() for "
    "small intervals)"
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
        _check_connect_client()
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


def _check_connect_client() -> None:
    """PySpark's Spark Connect client checks its own dependencies (pyspark's ``connect`` extra:
    pandas, grpcio, zstandard, ...) when it is imported, which a remote session's first build does:
    import it here, so a missing one fails the task before it plans anything."""
    try:
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as exc:  # pyspark's PySparkImportError is one
        raise ConfigurationError(
            f"Loading through Spark Connect needs PySpark's Spark Connect client, which this Python cannot "
            f"import ({exc}): install the provider with its apache-spark extra "
            "(pip install 'airflow-provider-kinesis-doris[spark,apache-spark]'), which brings pyspark[connect]"
        ) from exc


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


TASKS_PER_LOCAL_CORE = 4
"""Spark partitions per core of a local master, when the pipeline sets no ``parallelism``: each
partition costs a Python worker's task start and its own AWS and Doris clients (about 0.1 s and
0.15 CPU-s on ``local[2]``, docs/benchmarks.md), which one partition per range multiplies by the
shards of the stream; a few per core still keep every core busy while one range loads slowly."""


def local_cores(master: str) -> int:
    """The task slots of a local master: ``local`` 1, ``local[N]`` / ``local[N,F]`` N, ``local[*]``
    this machine's cores."""
    found = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if found is None or found.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if found.group(1) == "*" else int(found.group(1))


def run_spark_job(job: LoadJob, credentials: Credentials, settings: SparkSettings) -> list[RangeReport]:
    """Write the job's files, run it as ``settings`` say, and return one report per range.

    Empty ranges never get here: ``core.pipeline.run_interval`` settles them on the driver, and
    asks the label-window canary before it calls the runner. On a local master a job without
    ``parallelism`` is dealt into at most ``TASKS_PER_LOCAL_CORE`` partitions per core, each
    loading its range groups in lanes (``spark.source``).

    :raises ConfigurationError: PySpark or Java is missing (``check_prerequisites``).
    :raises KinesisDorisError: a range failed on an executor; raised as its own class.
    """
    check_prerequisites(settings)
    with private_folder() as folder:
        credentials_file = folder / f"credentials-{folder.name}.json"
        credentials.write(str(credentials_file))
        job = replace(job, credentials_file=str(credentials_file))
        reports = _submit(job, settings, folder) if settings.submitter else _in_process(job, settings)
    raise_first_failure(reports)
    return reports


def _in_process(job: LoadJob, settings: SparkSettings) -> list[RangeReport]:
    os.environ.setdefault("PYSPARK_PYTHON", settings.python or sys.executable)
    if settings.remote:
        return _run_connected(job, settings)
    # A cluster keeps a partition per range group, spread over its slots (or ``parallelism``).
    partitions = TASKS_PER_LOCAL_CORE * local_cores(settings.master) if job.pipeline.parallelism is None else None
    from pyspark.sql import SparkSession

    from airflow_provider_kinesis_doris.spark.job import run_job

    builder = SparkSession.builder.appName(_app_name(job)).master(settings.master)
    for key, value in _session_conf(settings).items():
        builder = builder.config(key, value)
    # A local session is kept for the next job of this process: starting one costs 4-8 s.
    return run_job(builder.getOrCreate(), job, partitions)


def _app_name(job: LoadJob) -> str:
    return f"kinesis-to-doris:{job.pipeline.pipeline_id}"


_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
"""PySpark's mark of a process as Spark Connect's: while it is set, ``pyspark.sql.functions`` build
Connect expressions and a local session is refused."""


def _run_connected(job: LoadJob, settings: SparkSettings) -> list[RangeReport]:
    """Run ``job`` in a Spark Connect session and end the session. Opening one costs a round
    trip, and one left open would keep this run's credentials file on the server and make this
    process's exit call a server that may be gone (PySpark's client retries such a call for
    minutes before it lets the process end).

    The session is built by Connect's own builder: PySpark's general one refuses a Connect session
    in a process that keeps a local one (``SESSION_ALREADY_EXIST``), and an earlier job of this
    process may have kept one (SparkOrInProcess, or ``dag.test()``'s single process). The mark
    that general builder would set is set for the run only, so that the process's next job may run
    Spark locally again."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from airflow_provider_kinesis_doris.spark.job import run_job

    builder = ConnectSession.builder.remote(settings.remote).appName(_app_name(job))
    for key, value in _session_conf(settings).items():
        builder = builder.config(key, value)
    marked = os.environ.get(_CONNECT_MODE)
    os.environ[_CONNECT_MODE] = "1"
    try:
        spark = builder.getOrCreate()
        try:
            reports = run_job(spark, _ship_credentials(spark, job), connected=True)
        except BaseException:
            # The server may be what failed: close the channel without a call to it.
            spark.client.close()
            raise
        spark.stop()  # releases the session on the server, and its artifacts with it
        return reports
    finally:
        if marked is None:
            os.environ.pop(_CONNECT_MODE, None)


def _ship_credentials(spark: Any, job: LoadJob) -> LoadJob:
    """Upload the credentials file to the Spark Connect server as a session artifact, whose
    executors may run on other hosts, and name it in the job without a folder, so that they read it
    through ``SparkFiles``. The session ends with the run (:func:`_run_connected`), and the file
    with it."""
    if not job.credentials_file:
        return job
    spark.addArtifacts(job.credentials_file, file=True)
    return replace(job, credentials_file=Path(job.credentials_file).name)


_LOCAL_CONF = {
    "spark.driver.extraJavaOptions": LOCAL_DRIVER_JAVA_OPTIONS,
    # The driver's RPC endpoint and block manager listen on the host's address by default: a
    # local-mode job has no peer to serve, so they listen on loopback only.
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    # The workers are forked with the load path imported (spark/daemon.py): a cluster's executors
    # start PySpark's own daemon, as they may not have this package until a task ships it.
    "spark.python.daemon.module": "airflow_provider_kinesis_doris.spark.daemon",
}


def _session_conf(settings: SparkSettings) -> dict[str, str]:
    """Spark's settings for ``settings``: ours, then for local mode the local ones, then the user's
    (which win). A submission's master is its connection's: a driver that listened on loopback
    would be out of its executors' reach."""
    if settings.remote:
        # A Spark Connect server's Spark is running already: a session can change only its SQL
        # settings, and the server warns of each other one (the UI and the Python workers are the
        # server's to set).
        ours = {key: value for key, value in _DEFAULT_CONF.items() if key.startswith("spark.sql.")}
        return {**ours, **settings.conf}
    local = settings.submitter is None
    return {**_DEFAULT_CONF, **(_LOCAL_CONF if local else {}), **settings.conf}


def _submit(job: LoadJob, settings: SparkSettings, folder: Path) -> list[RangeReport]:
    assert settings.submitter is not None
    job_file, report_file = folder / "job.json", folder / "reports.json"
    submission = prepare_submission(job, settings, job_file, report_file, _properties_file(settings, folder))
    log.info("spark-submit: %d ranges in %d partitions", len(job.ranges), len(job.groups))
    settings.submitter(submission)
    if not report_file.exists():
        raise RuntimeError(f"spark-submit ended without the job writing its reports ({report_file}); see the log above")
    return [RangeReport(**entry) for entry in json.loads(report_file.read_text())]


def prepare_submission(
    job: LoadJob, settings: SparkSettings, job_file: Path, report_file: Path, properties_file: Path | None = None
) -> Submission:
    """Write ``job`` to ``job_file`` and return its ``spark-submit``: paths and settings, never a
    secret (I8).

    The credentials file goes with ``--files`` and the job names it by its file name only, so
    executors always take it from ``SparkFiles`` (``spark/source.py``): a submission that did not
    ship it fails on the first executor instead of working where the driver's folder is visible.
    """
    shipped = (job.credentials_file,) if job.credentials_file else ()
    job_file.write_text((replace(job, credentials_file=Path(shipped[0]).name) if shipped else job).to_json())
    conf = {
        "spark.pyspark.python": settings.python or sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **_session_conf(settings),
    }
    return Submission(
        application=_job_script(),
        application_args=("--job-file", str(job_file), "--report-file", str(report_file)),
        conf=conf,
        files=shipped,
        py_files=tuple(settings.py_files),
        name=f"kinesis-to-doris:{job.pipeline.pipeline_id}",
        properties_file=str(properties_file) if properties_file else None,
    )


def _properties_file(settings: SparkSettings, folder: Path) -> Path | None:
    """A 0600 properties file turning ``spark.authenticate`` on with the settings' secret: Spark's
    standalone and YARN-client drivers read the secret from their configuration, and a ``--conf``
    would put it on the command line."""
    if not settings.auth_secret:
        return None
    path = folder / "spark-auth.properties"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(f"spark.authenticate=true\nspark.authenticate.secret={_property_value(settings.auth_secret)}\n")
    return path


def _property_value(value: str) -> str:
    """``value`` escaped for a Java properties file (``java.util.Properties.load``)."""
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + escaped if escaped[:1] in (" ", "\t") else escaped


def _job_script() -> str:
    from airflow_provider_kinesis_doris.spark import job

    return job.__file__


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
