"""What ``KinesisToDorisOperator`` builds from its grouped settings before a run: the Doris names,
the Stream Load options, the pipeline's ``PipelineConfig`` (with its stream consumer), the Spark
settings and the runner.

Kept apart from the operator so that it reads as seal → prepare → run → report, and so that each
rule lives once (``core`` and ``config`` check the values, this module only assembles them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException

from airflow_provider_kinesis_doris.config import (
    ARRIVAL_COLUMN,
    InProcessRunner,
    LoadConfig,
    MappingConfig,
    ReadConfig,
    RunnerConfig,
    SparkOrInProcess,
    SparkRunner,
    StateConfig,
)
from airflow_provider_kinesis_doris.core.decoders import CSV, plain_columns
from airflow_provider_kinesis_doris.core.doris.identifiers import check_name, split_table_name
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.loader_processes import find_cuts_in_processes, run_in_processes
from airflow_provider_kinesis_doris.core.pipeline import CutsElsewhere, PipelineConfig, Runner
from airflow_provider_kinesis_doris.core.runner_choice import SPARK, AutoRunner
from airflow_provider_kinesis_doris.operators.spark_connections import LoadJobSubmitter, spark_connect_url

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook
    from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook
    from airflow_provider_kinesis_doris.spark.runner import SparkSettings

log = logging.getLogger(__name__)


def table_names(doris_table: str, dead_letter_table: str | None) -> tuple[str, str, str]:
    """``doris_table``'s database and table and the dead-letter table, each a name Doris could
    have (``core.doris.identifiers``, which says which rule and why).

    :raises ConfigurationError: naming the argument and what is wrong with the name.
    """
    database, table = split_table_name(doris_table)
    check_name(database, f"doris_table {doris_table!r}, its database")
    check_name(table, f"doris_table {doris_table!r}, its table")
    if dead_letter_table is None:
        default = check_name(f"{table}_dead_letter", "mapping.dead_letter_table (default '<table>_dead_letter')")
        return database, table, default
    return database, table, check_name(dead_letter_table, "mapping.dead_letter_table")


def stream_load_options(load: LoadConfig, mapping: MappingConfig) -> StreamLoadOptions:
    """The Stream Load options of every chunk: JSON lines, strict mode unless ``load.options``
    says otherwise, the arrival column as sequence column for ``mapping.unique_key_sequence``."""
    options: dict[str, Any] = {"format": "json", "read_json_by_line": True, "strict_mode": True, **load.options}
    for name in ("columns", "jsonpaths"):
        if options.get(name) is not None:
            options[name] = tuple(options[name])
    if mapping.unique_key_sequence:
        options.setdefault("sequence_col", ARRIVAL_COLUMN)
    try:
        return StreamLoadOptions(**options, extra_headers=dict(load.headers))
    except TypeError as exc:
        raise ConfigurationError(f"load.options: {exc}; see StreamLoadOptions for the accepted names") from exc


def csv_columns(
    hook: DorisHook, database: str, table: str, mapping: MappingConfig, options: StreamLoadOptions
) -> tuple[str, ...] | None:
    """The field names of ``decoder="csv"``: ``load.options["columns"]``'s plain names, else the
    table's columns from ``DESC`` without the metadata columns."""
    if mapping.decoder != CSV:
        return None
    if options.columns:
        return plain_columns(options.columns)
    try:
        described = hook.column_types(database, table)
    except Exception as exc:
        raise ConfigurationError(
            f"decoder='csv' names its fields by the columns of Doris table {database}.{table}, and DESC of it "
            f"failed (does the table exist?); nothing was planned or loaded: {type(exc).__name__}: {exc}"
        ) from exc
    metadata = set(mapping.all_metadata_columns)
    return tuple(name for name, _ in described if name not in metadata)


def columns_to_match(
    hook: DorisHook, database: str, table: str, mapping: MappingConfig, options: StreamLoadOptions
) -> tuple[str, ...] | None:
    """The table's columns, which Doris matches the JSON members of each row to by name
    (``core.fields``); None where it does not (``columns`` or ``jsonpaths`` set, ``decoder="csv"``),
    or where ``DESC`` fails (the preflight names why; the load then says it)."""
    if mapping.decoder == CSV or options.columns or options.jsonpaths:
        return None
    try:
        return tuple(name for name, _ in hook.column_types(database, table))
    except Exception as exc:  # noqa: BLE001 - a missing table fails the load itself, naming it
        log.warning("DESC %s.%s failed, so the records' fields are not compared with its columns: %s", database, table, exc)
        return None


def pipeline_config(
    *, pipeline_id: str, stream_name: str, checkpoint_table: str, table_names: tuple[str, str, str], doris_hook: DorisHook,
    aws_hook: KinesisPipelineHook, executor_credentials: str, runner: RunnerConfig, mapping: MappingConfig,
    read: ReadConfig, load: LoadConfig, state: StateConfig,
) -> PipelineConfig:  # fmt: skip
    """The pipeline's ``PipelineConfig`` (which imports the transform and the decoder), without
    the Doris password; ``DESC`` of the table names the fields of ``decoder="csv"``.

    :param table_names: the database, table and dead-letter table, checked (:func:`table_names`).
    """
    database, table, dead_letter_table = table_names
    options = stream_load_options(load, mapping)
    spark = runner_kind(runner).spark_of(runner)
    return PipelineConfig(
        pipeline_id=pipeline_id, stream_name=stream_name, checkpoint_table=checkpoint_table,
        doris_database=database, doris_table=table, dead_letter_table=dead_letter_table,
        doris=replace(doris_hook.connection_config(), password=""), aws=aws_hook.aws_settings(executor_credentials),
        load_options=options, decoder=mapping.decoder,
        csv_columns=csv_columns(doris_hook, database, table, mapping, options),
        table_columns=columns_to_match(doris_hook, database, table, mapping, options),
        unmatched_fields=mapping.unmatched_fields,
        max_bad_record_ratio=load.max_bad_record_ratio,
        mapping=RecordMapping(metadata_columns=mapping.all_metadata_columns, required_fields=tuple(mapping.required_fields)),
        transform_path=mapping.transform, chunk_max_rows=load.chunk_max_rows, chunk_max_bytes=load.chunk_max_bytes,
        initial_position=read.initial_position, take_over_from=read.take_over_from, relaxed_order=read.relaxed_order,
        parallelism=spark.parallelism if spark else None, driver_concurrency=state.driver_concurrency,
        prune=state.prune, waiting_warn_after_ms=int(read.waiting_warn_after.total_seconds() * 1000),
    )  # fmt: skip


def spark_settings(runner: RunnerConfig) -> tuple[SparkSettings | None, LoadJobSubmitter | None]:
    """How to run the Spark job, None when ``runner`` never starts Spark (a ``spark`` connection is
    looked up only if it may), and the ``spark-submit`` submitter (for ``on_kill``) when it goes
    through a ``spark`` connection. A :class:`SparkRunner`'s prerequisites are checked here, a
    :class:`SparkOrInProcess`'s only if it chooses Spark."""
    from airflow_provider_kinesis_doris.spark.runner import SparkSettings, check_prerequisites

    kind = runner_kind(runner)
    spark = kind.spark_of(runner)
    if spark is None:
        return None, None
    submitter = LoadJobSubmitter(spark.spark_conn_id) if spark.spark_conn_id else None
    settings = SparkSettings(
        master=spark.master,
        remote=spark_connect_url(spark.spark_connect_conn_id) if spark.spark_connect_conn_id else None,
        submitter=submitter,
        conf=dict(spark.conf),
        python=spark.python,
        auth_secret=submitter.auth_secret if submitter else "",
    )
    if kind.always_spark:
        check_prerequisites(settings)
    return settings, submitter


def with_stream_consumer(config: PipelineConfig, read: ReadConfig, aws_hook: KinesisPipelineHook) -> PipelineConfig:
    """``config`` with the ARN of its stream consumer, registered if missing, when the pipeline
    reads with enhanced fan-out; ``config`` itself otherwise."""
    if read.mode != "efo":
        return config
    name = read.consumer_name(config.pipeline_id)
    try:
        return replace(config, efo_consumer_arn=aws_hook.register_consumer(config.stream_name, name))
    except Exception as exc:
        raise AirflowException(
            f"Registering the stream consumer {name!r} for read.mode='efo' failed; nothing was planned or loaded: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def build_runner(
    runner: RunnerConfig, store: CheckpointStore, settings: SparkSettings | None, concurrency: int
) -> tuple[Runner, AutoRunner | None]:
    """The runner of ``runner``'s kind, and the chooser when it decides per run (its ``choice``
    says what it chose)."""
    from airflow_provider_kinesis_doris.spark.runner import run_spark_job

    spark: Runner = partial(run_spark_job, settings=settings)  # type: ignore[arg-type]
    return runner_kind(runner).build(runner, spark, store, concurrency)


def cut_finder(runner: RunnerConfig) -> CutsElsewhere | None:
    """Where each plan's cuts are found ahead (:mod:`~.core.plan_cuts`): the loader processes of
    the runner's in-process settings (a Spark runner's on a local master: one a core), when it has
    more than one; else the plan reads them itself."""
    in_process = runner_kind(runner).in_process_of(runner)
    if in_process is None or in_process.processes <= 1:
        return None
    return partial(find_cuts_in_processes, processes=in_process.processes, lanes=in_process.lanes)


def loading_step(runner: RunnerConfig, auto: AutoRunner | None) -> str:
    """The load a run's runner ran, as a failure names it."""
    return runner_kind(runner).loading_step(runner, auto)


# -- the runner kinds -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunnerKind:
    """What the loader does with one class of runner settings."""

    spark_of: Callable[[Any], SparkRunner | None]
    """The Spark settings a run may use; None when it never starts Spark."""
    always_spark: bool
    """Whether every run starts Spark, so that its prerequisites are checked before planning."""
    build: Callable[[Any, Runner, CheckpointStore, int], tuple[Runner, AutoRunner | None]]
    """The runner, from the settings, the Spark job, the store and the driver's concurrency; and
    the chooser when it decides per run."""
    loading_step: Callable[[Any, AutoRunner | None], str]
    """The load a run ran, as a failure names it."""
    in_process_of: Callable[[Any], InProcessRunner | None]
    """The in-process settings whose loader processes find each plan's cuts ahead; None without."""


def _described(runner: SparkRunner | InProcessRunner, auto: AutoRunner | None) -> str:
    return runner.describe()


def _chosen_step(runner: SparkOrInProcess, auto: AutoRunner | None) -> str:
    chosen = auto.choice.runner if auto is not None and auto.choice is not None else SPARK
    return runner.spark.describe() if chosen == SPARK else runner.in_process.describe()


def _spark_job(runner: SparkRunner, spark: Runner, store: CheckpointStore, concurrency: int) -> tuple[Runner, None]:
    return spark, None


def _in_process(runner: InProcessRunner, spark: Runner, store: CheckpointStore, concurrency: int) -> tuple[Runner, None]:
    return _loader(runner), None


def _loader(runner: InProcessRunner) -> Runner:
    return partial(run_in_processes, lanes=runner.lanes, processes=runner.processes)


def _cut_finders_of_local_spark(runner: SparkRunner) -> InProcessRunner | None:
    """A Spark runner on a local master: the plan's cuts found in processes of the task, one a core
    of its master, which the Spark job uses only once the plan is made. A cluster's cores are not
    the task's: its plan reads them itself."""
    from airflow_provider_kinesis_doris.spark.runner import local_cores

    if runner.spark_conn_id or runner.spark_connect_conn_id:
        return None
    return InProcessRunner(processes=local_cores(runner.master))


def _spark_or_in_process(
    runner: SparkOrInProcess, spark: Runner, store: CheckpointStore, concurrency: int
) -> tuple[AutoRunner, AutoRunner]:
    auto = AutoRunner(store, spark=spark, in_process=_loader(runner.in_process),
                      max_records=runner.max_records, concurrency=concurrency)  # fmt: skip
    return auto, auto


RUNNER_KINDS: Mapping[type, RunnerKind] = {
    SparkRunner: RunnerKind(
        spark_of=lambda runner: runner, always_spark=True, build=_spark_job, loading_step=_described,
        in_process_of=lambda runner: _cut_finders_of_local_spark(runner),
    ),
    InProcessRunner: RunnerKind(
        spark_of=lambda runner: None, always_spark=False, build=_in_process, loading_step=_described,
        in_process_of=lambda runner: runner,
    ),
    SparkOrInProcess: RunnerKind(
        spark_of=lambda runner: runner.spark, always_spark=False, build=_spark_or_in_process, loading_step=_chosen_step,
        in_process_of=lambda runner: runner.in_process,
    ),
}
"""Each class of ``runner`` settings (``config.GROUPS["runner"]``) and what the loader does with
it: the one place a new kind is added."""


def runner_kind(runner: RunnerConfig) -> RunnerKind:
    """What the loader does with ``runner``, by its class (or the class it extends)."""
    return next(RUNNER_KINDS[kind] for kind in type(runner).__mro__ if kind in RUNNER_KINDS)
