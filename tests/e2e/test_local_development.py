"""docs/local-development.md, as a user follows it: its ``bash`` blocks run in order in one shell
(stack up, connections from the env file, a DAG of one's own, `airflow dags test`, a shard split
through kinesis-mock, a rerun, a query through the Doris stand-in, stack down).

Airflow 3.x only (``make test-af3``): each step starts Airflow anew, ~4 min a run on 2 cores; on
2.11 the connections the page sources are read by ``tests/airflow/test_local_stack_connections.py``
and the same commands by the e2e backfill test."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

DOC = REPO_ROOT / "docs" / "local-development.md"


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)


def _shell_env(airflow_home: Path) -> dict[str, str]:
    """The user's shell: this venv first on PATH, the checkout's code, the emulators of the
    checkout (``KINESIS_DORIS_NODE_MODULES``, as the doc says for a stack run outside it)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW_CONN_")}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "devstack")]),
            "KINESIS_DORIS_NODE_MODULES": str(REPO_ROOT / "node_modules"),
            "AIRFLOW_HOME": str(airflow_home),
        }
    )
    return env


# Three `airflow dags test` runs and five Python steps that import Airflow: about 5 minutes on 2
# busy cores (load 7), most of it Airflow's start-up in each command.
@pytest.mark.timeout(960)
def test_the_walk_through_runs_as_written(tmp_path: Path, airflow_db: Path) -> None:
    blocks = _bash_blocks()
    assert blocks[0].startswith("python -m kinesis_doris_devstack.stack up") and "stack down" in blocks[-1]
    state = tmp_path / ".local-stack"
    try:
        shell = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", "\n".join(blocks)],
            cwd=tmp_path, env=_shell_env(airflow_db), capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    finally:
        if (state / "endpoints.json").exists():  # the script stopped before its `stack down`
            subprocess.run([sys.executable, "-m", "kinesis_doris_devstack.stack", "down", "--state-dir", str(state)],
                           env=_shell_env(airflow_db), timeout=60)  # fmt: skip
    assert shell.returncode == 0, f"{shell.stdout[-4000:]}\n{shell.stderr[-6000:]}"
    lines = shell.stdout.splitlines()
    assert lines.count("put 100 events, 0 failed") == 2
    (shards,) = [line for line in lines if line.startswith("shards: ")]
    assert ast.literal_eval(shards.removeprefix("shards: ")) == [f"shardId-00000000000{n}" for n in range(4)]
    assert "((200, 200),)" in lines  # the doc's query: every event once
    (per_shard_line,) = [line for line in lines if line.startswith("(('shardId-")]  # (the hook logs between)
    per_shard = dict(ast.literal_eval(per_shard_line))
    assert sum(per_shard.values()) == 200 and {"shardId-000000000002", "shardId-000000000003"} <= set(per_shard)
    assert not (state / "endpoints.json").exists() and not (state / "airflow-connections.env").exists()
