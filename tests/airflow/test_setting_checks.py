"""Each setting is checked once: a literal when the DAG file is parsed, a template once rendered,
and never again on its way to the wire (issue 45). A real Airflow run (``dag.test()``, tasks in
this process on both majors) with every check of the package watched: the test lists, per
setting, the checks it met in each phase, and fails where one is met twice or a literal is
checked again when the task runs.

Runs under Airflow 3.x (``.venv``) and 2.11 (the floors' environment).
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

from kinesis_doris_devstack.scenario import create_stream, event, put_events, wait_past
from tests.conftest import dag_file_in_a_bundle, events_table_on_local_stack

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DB = "checks"
INTERVAL_S = 5
_names = itertools.count()

# Every group given, each field set to a literal that is not its default where that is cheap to
# run; the templated DAG renders the groups' template fields from params.
DAG_FILE = '''
import os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_kinesis_doris import InProcessRunner, LoadConfig, MappingConfig, ReadConfig, StateConfig
from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

try:
    from airflow.sdk import DeltaDataIntervalTimetable
except ImportError:
    from airflow.timetables.interval import DeltaDataIntervalTimetable

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SCHEDULE = DeltaDataIntervalTimetable(timedelta(seconds={interval_s}))
TEMPLATED = os.environ["KD_CHECKS_TEMPLATED"] == "true"

with DAG(dag_id="kd_checks", schedule=SCHEDULE, start_date=START, catchup=False,
         params={"dead_letters": os.environ["KD_CHECKS_TABLE"].split(".")[1] + "_dead_letter"}) as dag:
    KinesisToDorisOperator(
        task_id="load",
        stream_name=os.environ["KD_CHECKS_STREAM"],
        doris_table=os.environ["KD_CHECKS_TABLE"],
        checkpoint_table="checks_checkpoints",
        pipeline_id=os.environ["KD_CHECKS_PIPELINE"],
        aws_conn_id="aws_default",
        doris_conn_id="{{ 'doris_default' }}" if TEMPLATED else "doris_default",
        executor_credentials="driver",
        runner=InProcessRunner(lanes=2),
        mapping=MappingConfig(
            dead_letter_table="{{ params.dead_letters }}" if TEMPLATED else None,
            required_fields=["event_id"], unmatched_fields="report",
        ),
        read=ReadConfig(seal_grace=timedelta(0), mode="polling", initial_position="INTERVAL"),
        load=LoadConfig(chunk_max_rows=500, chunk_max_bytes=1_000_000, max_bad_record_ratio=0.2,
                        options={"where": "{{ 'event_id >= 0' }}" if TEMPLATED else "event_id >= 0"}),
        state=StateConfig(driver_concurrency=4, max_skipped_intervals=5, create_checkpoint_table=True),
    )
'''.replace("{interval_s}", str(INTERVAL_S))


def _check_functions() -> dict[CodeType, str]:
    """The code of every check in the package: the rule functions of ``core.value_checks`` and
    the checks that take no setting name (named here by the setting they check). Not counted:
    the invariants of the core's values (``ChunkLimits``, ``Position``), which hold wherever one
    is made, from a stored item or a job's JSON as much as from a setting."""
    from airflow_provider_kinesis_doris.core import decoders, settings, value_checks
    from airflow_provider_kinesis_doris.core.doris import identifiers

    named = {function.__code__: "" for name, function in inspect.getmembers(value_checks, inspect.isfunction)
             if name.startswith("check_") and function.__module__ == value_checks.__name__}  # fmt: skip
    return {
        **named,
        decoders.check_load_options.__code__: "load.options",
        decoders.check_decoder.__code__: "mapping.decoder",
        identifiers.check_name.__code__: "",
        settings.check_executor_credentials.__code__: "executor_credentials",
    }


class CheckSpy:
    """The checks met while ``dag.test()`` runs, by stage: each execution of the DAG file
    (``parse``: in the test, then on Airflow 3 again in the task, as a task's process parses its
    DAG file),
    each ``render_template_fields``, and the rest of the task (``execute``). Other DAG files that
    Airflow parses meanwhile are left out. Only the outermost check of a call chain counts (a rule
    that calls another rule is one check); a check is a (setting, rule) pair."""

    def __init__(self, dag_file: Path) -> None:
        from airflow_provider_kinesis_doris.operators.kinesis_to_doris import KinesisToDorisOperator

        self.checks = _check_functions()
        self._dag_file = str(dag_file)
        self._render = KinesisToDorisOperator.render_template_fields.__code__
        self.stages: list[tuple[str, Counter[tuple[str, str]]]] = [("execute", Counter())]
        self._open: list[tuple[CodeType, Counter[tuple[str, str]] | None]] = []
        self._depth = 0

    def _setting(self, frame: FrameType) -> str:
        return self.checks[frame.f_code] or str(frame.f_locals.get("what") or frame.f_locals.get("name"))

    def _stage_of(self, code: CodeType) -> str | None:
        if code is self._render:
            return "render"
        if code.co_name == "<module>" and code.co_filename.endswith(".py") and "site-packages" not in code.co_filename:
            return "parse" if code.co_filename == self._dag_file else "elsewhere"
        return None

    def _profile(self, frame: FrameType, event_name: str, _: Any) -> None:
        if event_name not in ("call", "return"):
            return
        code = frame.f_code
        if self._open and event_name == "return" and self._open[-1][0] is code:
            self._open.pop()
            return
        if event_name == "call" and (stage := self._stage_of(code)) is not None:
            counter = None if stage == "elsewhere" else Counter[tuple[str, str]]()
            if counter is not None:
                self.stages.append((stage, counter))
            self._open.append((code, counter))
            return
        if code not in self.checks:
            return
        if event_name == "return":
            self._depth -= 1
            return
        if self._depth == 0:
            counter = self._open[-1][1] if self._open else self.stages[0][1]
            if counter is not None:  # None: another DAG file's checks
                counter[(self._setting(frame), code.co_name)] += 1
        self._depth += 1

    @contextmanager
    def watching(self) -> Iterator[None]:
        # Threads too: the driver checks in its pool's threads.
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def of(self, stage: str) -> list[Counter[tuple[str, str]]]:
        return [counter for name, counter in self.stages if name == stage]

    def settings(self, stage: str) -> Counter[str]:
        """How often each setting was checked in ``stage``, all its entries together."""
        return Counter(setting for counter in self.of(stage) for (setting, _), count in counter.items() for _ in range(count))

    def report(self) -> str:
        return "\n".join(f"{name}: {dict(sorted(counter.items()))}" for name, counter in self.stages)


@pytest.fixture
def stack(airflow_db: Path, monkeypatch: pytest.MonkeyPatch, kinesis_client: Any, kinesis_mock_endpoint: str,
          dynamodb_endpoint: str, doris_server: Any) -> dict[str, str]:  # fmt: skip
    n = next(_names)
    stream, table = f"checks-{n}-{datetime.now().strftime('%H%M%S%f')}", f"events_{n}"
    events_table_on_local_stack(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, DB, table)
    create_stream(kinesis_client, stream, 1)
    monkeypatch.setenv("KD_CHECKS_STREAM", stream)
    monkeypatch.setenv("KD_CHECKS_TABLE", f"{DB}.{table}")
    monkeypatch.setenv("KD_CHECKS_PIPELINE", f"checks-{n}")
    return {"stream": stream, "table": table}


def _parse_and_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kinesis_client: Any, stack: dict[str, str],
                   templated: bool) -> CheckSpy:  # fmt: skip
    from airflow_provider_kinesis_doris.version_compat import AIRFLOW_V_3_0_PLUS

    monkeypatch.setenv("KD_CHECKS_TEMPLATED", str(templated).lower())
    path = dag_file_in_a_bundle(monkeypatch, tmp_path / "bundle", "kd-checks", "kd_checks.py", DAG_FILE)
    put_events(kinesis_client, stack["stream"], [event(i) for i in range(3)])
    end_ms = ((int(datetime.now(timezone.utc).timestamp()) // INTERVAL_S) + 1) * INTERVAL_S * 1000
    wait_past(end_ms)
    logical_date = datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)
    spy = CheckSpy(path)
    with spy.watching():
        spec = importlib.util.spec_from_file_location(f"kd_checks_{next(_names)}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        run = module.dag.test(**{"logical_date" if AIRFLOW_V_3_0_PLUS else "execution_date": logical_date})
    assert "success" in str(run.state).lower(), f"{run.state}\n{spy.report()}"
    return spy


def _twice(spy: CheckSpy) -> dict[str, int]:
    """Checks met more than once in one parse, one rendering or the task's execution."""
    return {f"{stage}: {setting} ({rule})": count for stage, counter in spy.stages
            for (setting, rule), count in counter.items() if count > 1}  # fmt: skip


# Settings of the operator's template_fields: a template is checked once rendered, never at parse
# time (a literal is checked at parse time, as any other).
CHECKED_WHEN_RENDERED = {"stream_name", "checkpoint_table", "pipeline_id", "doris_table", "aws_conn_id",
                         "region_name", "verify", "botocore_config", "doris_conn_id"}  # fmt: skip
# Checks that need what only the run knows: the Doris names of a templated doris_table and
# dead-letter table (core.doris.identifiers).
RUN_ONLY_PREFIXES = ("doris_table", "mapping.dead_letter_table")


def test_a_literal_setting_is_checked_once_when_the_dag_is_parsed_and_not_again_when_it_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kinesis_client: Any, stack: dict[str, str]
) -> None:
    spy = _parse_and_run(monkeypatch, tmp_path, kinesis_client, stack, templated=False)
    assert not _twice(spy), f"checked twice: {_twice(spy)}\n{spy.report()}"
    # Parsed here, and on Airflow 3 again in the task (2.11's dag.test() runs the parsed DAG).
    parses = spy.of("parse")
    assert parses, spy.report()
    # Each parse checks the groups' fields and the operator's own arguments, by their names.
    for setting in ("load.chunk_max_rows", "runner.lanes", "state.driver_concurrency", "read.seal_grace",
                    "load.max_bad_record_ratio", "executor_credentials", "load.options", "aws_conn_id"):  # fmt: skip
        assert all(any(name == setting for name, _ in parse) for parse in parses), f"{setting}\n{spy.report()}"
    # Rendering checks only the operator's templated arguments (its template_fields, which the
    # parse leaves alone); the task checks only what the parse could not know.
    rendered = set(spy.settings("render"))
    assert rendered <= CHECKED_WHEN_RENDERED, f"{sorted(rendered - CHECKED_WHEN_RENDERED)}\n{spy.report()}"
    again = sorted(setting for setting in spy.settings("execute") if not setting.startswith(RUN_ONLY_PREFIXES))
    assert not again, f"settings checked again when the task ran: {again}\n{spy.report()}"


def test_a_templated_setting_is_checked_once_rendered_and_a_literal_beside_it_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kinesis_client: Any, stack: dict[str, str]
) -> None:
    spy = _parse_and_run(monkeypatch, tmp_path, kinesis_client, stack, templated=True)
    assert not _twice(spy), f"checked twice: {_twice(spy)}\n{spy.report()}"
    rendered = spy.settings("render")
    # The templated option and dead-letter table are checked once rendered; the literal fields of
    # the same groups (chunk_max_rows beside options) are not checked again.
    assert rendered["mapping.dead_letter_table"] == 1 and rendered["load.options"] >= 1, spy.report()
    assert rendered["load.chunk_max_rows"] == 0 and rendered["mapping.required_fields"] == 0, spy.report()
    # So is the templated connection id, and not when the DAG file is parsed.
    assert rendered["doris_conn_id"] == 1, spy.report()
    assert all(name != "doris_conn_id" for parse in spy.of("parse") for name, _ in parse), spy.report()
