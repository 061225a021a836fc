"""The facts of docs/usage.md "Schedules and dates", checked on the running Airflow major: which
timetable each ``schedule=`` gives and whether its intervals are real, and which interval
``dag.test()`` (what ``airflow dags test`` runs) loads for the date it is given.

Runs under Airflow 3.x (``.venv``) and 2.11 (``.venv-af2``).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
import pytest

from tests.conftest import dag_file_in_a_bundle

pytestmark = [pytest.mark.airflow]

START = pendulum.datetime(2026, 1, 1, tz="UTC")
_names = itertools.count()


def _timetables() -> dict[str, Any]:
    try:
        from airflow.sdk import (
            CronDataIntervalTimetable,
            CronTriggerTimetable,
            DeltaDataIntervalTimetable,
            DeltaTriggerTimetable,
        )
    except ImportError:  # Airflow 2.11
        from airflow.timetables.interval import CronDataIntervalTimetable, DeltaDataIntervalTimetable
        from airflow.timetables.trigger import CronTriggerTimetable, DeltaTriggerTimetable
    ten = timedelta(minutes=10)
    return {
        "delta_data": DeltaDataIntervalTimetable(ten),
        "cron_data": CronDataIntervalTimetable("*/10 * * * *", timezone="UTC"),
        "cron_trigger_interval": CronTriggerTimetable("*/10 * * * *", timezone="UTC", interval=ten),
        "delta_trigger_interval": DeltaTriggerTimetable(ten, interval=ten),
        "timedelta": ten,
        "cron_string": "*/10 * * * *",
        "cron_trigger": CronTriggerTimetable("*/10 * * * *", timezone="UTC"),
        "delta_trigger": DeltaTriggerTimetable(ten),
        "none": None,
        "once": "@once",
        "continuous": "@continuous",
    }


# schedule -> (timetable on 2.11, timetable on 3.x, real intervals on 2.11, on 3.x)
TABLE = {
    "delta_data": ("DeltaDataIntervalTimetable", "DeltaDataIntervalTimetable", True, True),
    "cron_data": ("CronDataIntervalTimetable", "CronDataIntervalTimetable", True, True),
    "cron_trigger_interval": ("CronTriggerTimetable", "CronTriggerTimetable", True, True),
    "delta_trigger_interval": ("DeltaTriggerTimetable", "DeltaTriggerTimetable", True, True),
    "timedelta": ("DeltaDataIntervalTimetable", "DeltaTriggerTimetable", True, False),
    "cron_string": ("CronDataIntervalTimetable", "CronTriggerTimetable", True, False),
    "cron_trigger": ("CronTriggerTimetable", "CronTriggerTimetable", False, False),
    "delta_trigger": ("DeltaTriggerTimetable", "DeltaTriggerTimetable", False, False),
    "none": ("NullTimetable", "NullTimetable", False, False),
    "once": ("OnceTimetable", "OnceTimetable", False, False),
    "continuous": ("ContinuousTimetable", "ContinuousTimetable", False, False),
}


def _core(timetable: Any) -> Any:
    """The scheduler's timetable (Airflow 3 keeps the DAG author's and the scheduler's apart)."""
    try:
        from airflow.serialization.encoders import coerce_to_core_timetable
    except ImportError:  # Airflow 2.11
        return timetable
    return coerce_to_core_timetable(timetable)


@pytest.mark.parametrize("schedule", sorted(TABLE))
def test_the_timetable_table(schedule: str) -> None:
    from airflow.providers.common.compat.sdk import DAG

    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    name_2, name_3, real_2, real_3 = TABLE[schedule]
    extra = {"max_active_runs": 1} if schedule == "continuous" else {}
    dag = DAG(dag_id=f"kd_usage_{schedule}", schedule=_timetables()[schedule], start_date=START, catchup=False, **extra)

    assert type(dag.timetable).__name__ == (name_3 if AIRFLOW_V_3_0_PLUS else name_2)
    manual = _core(dag.timetable).infer_manual_data_interval(run_after=pendulum.datetime(2026, 1, 1, 0, 30, tz="UTC"))
    real = real_3 if AIRFLOW_V_3_0_PLUS else real_2
    if real:
        assert (manual.start, manual.end) == (pendulum.datetime(2026, 1, 1, 0, 20, tz="UTC"), pendulum.datetime(2026, 1, 1, 0, 30, tz="UTC"))
    else:
        assert manual.start == manual.end


@pytest.mark.parametrize("schedule", ["delta_data", "cron_data"])
def test_a_scheduled_run_is_named_by_its_interval_start(schedule: str) -> None:
    from airflow.providers.common.compat.sdk import DAG
    from airflow.timetables.base import TimeRestriction

    dag = DAG(dag_id=f"kd_usage_next_{schedule}", schedule=_timetables()[schedule], start_date=START, catchup=True)
    info = _core(dag.timetable).next_dagrun_info(
        last_automated_data_interval=None, restriction=TimeRestriction(earliest=START, latest=None, catchup=True)
    )
    assert info.logical_date == START
    assert (info.data_interval.start, info.data_interval.end) == (START, START.add(minutes=10))
    assert info.run_after == START.add(minutes=10)


@pytest.mark.parametrize(
    ("schedule", "given", "loaded"),
    [
        ("cron_data", "00:35", ("00:20", "00:30")),  # off the grid: the last complete interval
        ("delta_data", "00:35", ("00:25", "00:35")),  # off the grid: exactly [date - delta, date)
        ("cron_data", "00:00", ("23:50", "00:00")),  # the start of [00:00, 00:10) loads the one before
    ],
)
def test_a_manual_run_loads_the_interval_that_ends_at_its_date(schedule: str, given: str, loaded: tuple[str, str]) -> None:
    from airflow.providers.common.compat.sdk import DAG

    dag = DAG(dag_id=f"kd_usage_manual_{schedule}", schedule=_timetables()[schedule], start_date=START, catchup=False)
    hour, minute = map(int, given.split(":"))
    interval = _core(dag.timetable).infer_manual_data_interval(run_after=pendulum.datetime(2026, 1, 1, hour, minute, tz="UTC"))
    assert (interval.start.strftime("%H:%M"), interval.end.strftime("%H:%M")) == loaded


DAG_FILE = '''
import json, os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

try:
    from airflow.sdk import DeltaDataIntervalTimetable, task
except ImportError:
    from airflow.decorators import task
    from airflow.timetables.interval import DeltaDataIntervalTimetable


def record(**context):
    with open(os.environ["KD_USAGE_OUT"], "w") as out:
        json.dump([str(context["data_interval_start"]), str(context["data_interval_end"])], out)


with DAG(dag_id="kd_usage_dates", schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
    task(task_id="record")(record)()
'''


def test_dag_test_with_a_date_runs_the_interval_ending_there(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    path = dag_file_in_a_bundle(monkeypatch, tmp_path / "bundle", "kd-usage", "kd_usage_dates.py", DAG_FILE)
    monkeypatch.setenv("KD_USAGE_OUT", str(tmp_path / "interval.json"))
    spec = importlib.util.spec_from_file_location(f"kd_usage_dates_{next(_names)}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    date = pendulum.datetime(2026, 1, 1, 0, 30, tz="UTC")

    dag_run = module.dag.test(logical_date=date) if AIRFLOW_V_3_0_PLUS else module.dag.test(execution_date=date)

    assert "success" in str(dag_run.state).lower(), dag_run.state
    assert json.loads((tmp_path / "interval.json").read_text()) == ["2026-01-01 00:20:00+00:00", "2026-01-01 00:30:00+00:00"]
    assert dag_run.logical_date == date  # the run carries the date given, the interval's end


def test_the_readme_dag_schedules_real_intervals() -> None:
    """The README's "A minimal DAG", copied as a user would, gives 10-minute intervals here."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = [block.split("```", 1)[0] for block in readme.split("```python\n")[1:]]
    (code,) = [block for block in blocks if 'dag_id="events_to_doris"' in block]
    namespace: dict[str, Any] = {}
    exec(compile(code.replace("\n):\n", "\n) as dag:\n", 1), "README.md", "exec"), namespace)  # noqa: S102

    dag = namespace["dag"]
    assert type(dag.timetable).__name__ == "CronDataIntervalTimetable"
    interval = _core(dag.timetable).infer_manual_data_interval(run_after=pendulum.datetime(2026, 1, 1, 0, 30, tz="UTC"))
    assert (interval.start, interval.end) == (pendulum.datetime(2026, 1, 1, 0, 20, tz="UTC"), pendulum.datetime(2026, 1, 1, 0, 30, tz="UTC"))
