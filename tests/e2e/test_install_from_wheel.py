"""README "Install into an existing Airflow": the wheel built from this checkout installs into a fresh venv
next to a pinned Airflow, registers as a provider and its example DAGs parse there.

Only the Airflow 3.x venv runs it (not marked ``airflow``): the fresh venv gets Airflow 3.3.2 from
``requirements/airflow3.txt``, whatever Airflow runs pytest; an Airflow 2.11 venv would double its
time. The venv is filled by the project's uv from its warm cache (``make`` installs the same pins
with it; pip's cache is cold there), with the Spark extra: 78 s on 2 cores, 152 s while other
suites ran, instead of a fresh download of ~300 packages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

AIRFLOW_VERSION = "3.3.2"
# Run inside the fresh venv: what a user checks after installing.
PROBE = """
import json, os
from importlib.metadata import entry_points
from airflow.models.dagbag import DagBag

(entry,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_provider_kinesis_doris")]
info = entry.load()()
bag = DagBag(dag_folder=os.environ["DAGS"])  # examples are off: AIRFLOW__CORE__LOAD_EXAMPLES
print(json.dumps({"package": info["package-name"], "connection_types": [c["connection-type"] for c in info["connection-types"]],
                  "dags": sorted(bag.dag_ids), "import_errors": {k: str(v) for k, v in bag.import_errors.items()}}))
"""


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{argv[:4]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_built_wheel_installs_next_to_a_pinned_airflow_and_registers(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(wheels), str(REPO_ROOT)])
    (wheel,) = wheels.glob("airflow_provider_kinesis_doris-*.whl")
    venv = tmp_path / "venv"
    uv = str(Path(sys.executable).parent / "uv")
    _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)])
    _run([
        uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
        f"{wheel}[spark]", f"apache-airflow=={AIRFLOW_VERSION}",
        "-c", str(REPO_ROOT / "requirements" / "airflow3.txt"), "--override", str(REPO_ROOT / "requirements" / "overrides.txt"),
    ])  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(tmp_path / "airflow"), "DAGS": str(REPO_ROOT / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}  # fmt: skip
    # Run from tmp_path: the checkout's own package must not shadow the installed wheel.
    probe = _run([str(venv / "bin" / "python"), "-c", PROBE], env=env, cwd=tmp_path)
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["package"] == "airflow-provider-kinesis-doris"
    assert "doris" in found["connection_types"]
    assert found["import_errors"] == {}
    assert {"kinesis_to_doris_example", "kinesis_reshard_watch_example"} <= set(found["dags"])
    installed = _run([str(venv / "bin" / "python"), "-c", "import airflow_provider_kinesis_doris as p; print(p.__file__)"], cwd=tmp_path)
    assert str(venv) in installed.stdout
