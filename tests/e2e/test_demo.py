"""``make demo`` as a newcomer runs it, on Airflow 3.x and 2.11: the whole walk-through must end with every valid event
once, every malformed one dead-lettered and the resharded shards drained; Ctrl-C must leave no
process behind, and the next run must start clean from the state the interrupted one left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.spark]

DEMO = [sys.executable, "-m", "kinesis_doris_devstack.demo"]


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo")


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            found |= {int(child), *_descendants(int(child))}
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_ctrl_c_stops_everything_the_demo_started(state_dir: Path) -> None:
    demo = subprocess.Popen([*DEMO, "--state-dir", str(state_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in demo.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "interval 1/6" in line:  # the stack, the watch and the loader process are all up
                break
        started = _descendants(demo.pid)
        demo.send_signal(signal.SIGINT)
        output = demo.communicate(timeout=120)[0]
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130, "".join(lines) + output
    assert "interrupted" in output
    assert len(started) >= 5, f"expected the three services, the watch and the loader process, found {started}"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in started if _alive(pid)] == []


def test_demo_loads_every_valid_event_once_through_a_reshard(state_dir: Path) -> None:
    result = subprocess.run([*DEMO, "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=900)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((state_dir / "report.json").read_text())
    assert report["ok"] and report["duplicates"] == 0 and report["every_valid_event_once"]
    assert report["rows_in_doris"] == report["valid_events"] == report["events_produced"] - report["malformed_events"]
    assert report["dead_lettered"] == report["malformed_events"] > 0
    assert report["audit"]["ok"] and report["audit"]["rows_found"] == report["rows_in_doris"], report["audit"]
    states = {shard["shard_id"]: (shard["state"], len(shard["parents"])) for shard in report["shards"]}
    assert sorted(states.values()) == sorted(
        [("DRAINED", 0)] * 3 + [("OPEN", 0)] + [("OPEN", 1)] * 2 + [("OPEN", 2)]
    ), states
    assert "[22/22]" in result.stdout and result.stdout.rstrip().splitlines()[-1].startswith("OK")
    assert os.listdir(state_dir / "logs")
