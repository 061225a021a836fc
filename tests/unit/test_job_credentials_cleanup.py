"""The 0600 credentials file never outlives the run that wrote it, even a SIGKILLed one (I8).

Each test starts a real child process that writes the credentials as ``run_spark_job`` does and
then blocks, kills it with SIGKILL (no ``finally``, no ``atexit`` runs) and looks at the disk.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from airflow_provider_kinesis_doris.spark.runner import private_folder

SECRET = "doris-pw-4711"
# What a task does while Spark runs: the credentials are on disk and the process waits.
_CHILD = f"""
import sys, time
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.spark.runner import private_folder
with private_folder() as folder:
    Credentials(doris_password={SECRET!r}).write(str(folder / "credentials.json"))
    print(folder, flush=True)
    time.sleep(120)
"""


def _start_task() -> tuple[subprocess.Popen[str], Path]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True)  # noqa: S603
    assert child.stdout is not None
    folder = Path(child.stdout.readline().strip())
    credentials = folder / "credentials.json"
    assert SECRET in credentials.read_text()
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    return child, folder


def _kill(process_id: int) -> None:
    os.kill(process_id, signal.SIGKILL)


def _gone_within(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


def _processes_naming(text: str) -> list[int]:
    """Process ids whose command line mentions ``text`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_sigkilled_task_leaves_no_credentials_file() -> None:
    """Before, the folder was removed only by a ``finally``: a SIGKILL left the password on disk."""
    child, folder = _start_task()

    _kill(child.pid)
    child.wait()

    assert _gone_within(folder, 10), f"{folder} outlived the killed task: {sorted(p.name for p in folder.iterdir())}"


def test_the_next_run_removes_the_folder_of_a_task_killed_together_with_its_reaper() -> None:
    """A whole cgroup killed at once takes the reaper along; the next run on the host cleans up,
    and leaves the folder of a live run alone."""
    killed, killed_folder = _start_task()
    live, live_folder = _start_task()
    try:
        for process_id in (*_processes_naming(str(killed_folder)), killed.pid):
            _kill(process_id)
        killed.wait()
        assert killed_folder.exists()

        with private_folder() as mine:
            assert mine.exists()

        assert not killed_folder.exists()
        assert (live_folder / "credentials.json").exists()
    finally:
        _kill(live.pid)
        live.wait()
    assert _gone_within(live_folder, 10)
