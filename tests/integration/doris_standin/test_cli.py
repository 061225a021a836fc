"""The command line: ports announced as one JSON line, password from the environment,
served until SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from doris_raw import PASSWORD, USER, RawDoris

pytestmark = pytest.mark.integration


class _Ports:
    """Just what RawDoris needs to talk to a server running in another process."""

    host = "127.0.0.1"

    def __init__(self, fe_port: int, be_port: int) -> None:
        self.fe_port, self.be_port = fe_port, be_port


def test_cli_serves_until_sigterm_and_keeps_data_in_the_data_dir(tmp_path: Path) -> None:
    env = {**os.environ, "DORIS_STANDIN_PASSWORD": PASSWORD}
    command = [sys.executable, "-m", "kinesis_doris_devstack.doris_server",
               "--host", "127.0.0.1", "--fe-port", "0", "--be-port", "0", "--user", USER,
               "--data-dir", str(tmp_path),
               "--label-keep-seconds", "60"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        announced = json.loads(process.stdout.readline())
        assert announced["pid"] == process.pid and announced["fe_port"] > 0 and announced["be_port"] > 0
        raw = RawDoris(_Ports(announced["fe_port"], announced["be_port"]))  # type: ignore[arg-type]
        assert raw.sql("CREATE DATABASE demo", db="information_schema")["code"] == 0
        assert raw.sql("CREATE TABLE t (k INT) DUPLICATE KEY(k)")["code"] == 0
        assert raw.stream_load("t", b"1\n2\n", label="cli_1")["NumberLoadedRows"] == 2
    finally:
        os.kill(process.pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert PASSWORD not in stderr
    assert (tmp_path / "demo.sqlite3").is_file()
