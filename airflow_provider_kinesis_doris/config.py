"""The grouped settings of ``KinesisToDorisOperator``, as astronomer-cosmos groups its own
(``ProfileConfig``, ``ExecutionConfig``): how the load runs (a runner), how a record becomes a row
(``MappingConfig``), how and when the stream is read (``ReadConfig``), how rows go to Doris
(``LoadConfig``) and how the checkpoint table is kept (``StateConfig``).

Each object checks every field when it is built (a bad literal fails the DAG's parse), and the
fields that held a template once more when Airflow has rendered them (the operator lists the
objects among its own ``template_fields``, and Airflow renders a nested object's
``template_fields`` on both majors): each value once, raising :class:`ConfigurationError` that
names the parameter as ``<group>.<field>``, e.g. ``load.chunk_max_rows``. The core trusts what
these checked (``tests/airflow/test_setting_checks.py`` lists every check a run meets).

The module imports neither Airflow nor PySpark: the package exports these names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import timedelta
from functools import partial
from typing import Any, ClassVar, Literal, Union

from airflow_provider_kinesis_doris.core.catch_up import DEFAULT_MAX_SKIPPED_INTERVALS
from airflow_provider_kinesis_doris.core.model import ChunkLimits
from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY
from airflow_provider_kinesis_doris.core.decoders import JSON, check_decoder, check_load_options
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.fields import UNMATCHED_FIELDS_CHOICES
from airflow_provider_kinesis_doris.core.kinesis.consumer import consumer_name
from airflow_provider_kinesis_doris.core.settings import DRIVER_CREDENTIALS
from airflow_provider_kinesis_doris.core.stores.buckets import check_pipeline_id
from airflow_provider_kinesis_doris.core.plan import InitialPosition
from airflow_provider_kinesis_doris.core.runner_choice import DEFAULT_IN_PROCESS_MAX_RECORDS
from airflow_provider_kinesis_doris.core.value_checks import (
    check_choice,
    check_duration,
    check_flag,
    check_local_master,
    check_optional_mapping,
    check_optional_text,
    check_optional_whole_number,
    check_ratio,
    check_text,
    check_texts,
    check_whole_number,
)

__all__ = [
    "DRIVER_CREDENTIALS",
    "ConfigurationError",
    "InProcessRunner",
    "LoadConfig",
    "MappingConfig",
    "ReadConfig",
    "RunnerConfig",
    "SparkOrInProcess",
    "SparkRunner",
    "StateConfig",
]

Check = Callable[[str, Any], object]

ARRIVAL_COLUMN = "_kinesis_arrival"


def holds_template(value: Any) -> bool:
    """Whether Airflow's rendering can change ``value``: a string with ``{{``, a mapping holding
    one, or a group with a templated field."""
    if isinstance(value, str):
        return "{{" in value
    if isinstance(value, Mapping):
        return any(holds_template(item) for item in value.values())
    return isinstance(value, _Group) and bool(value.templated)


class _Group:
    """Checks its fields when built (:meth:`validate`), and those that held a template again
    once rendered (:meth:`validate_rendered`)."""

    parameter: ClassVar[str]
    """The operator's parameter holding the object, as errors name it."""
    checks: ClassVar[Mapping[str, Check]]
    template_fields: ClassVar[Sequence[str]] = ()

    def __post_init__(self) -> None:
        self.templated = frozenset(name for name in self.template_fields if holds_template(getattr(self, name)))
        """The fields whose values rendering can change, as the object was built."""
        self.validate()

    def validate(self, names: Collection[str] | None = None) -> None:
        """Check the fields ``names`` (all by default).

        :raises ConfigurationError: naming the first bad field as ``<parameter>.<field>``.
        """
        for name, check in self.checks.items():
            if names is None or name in names:
                check(f"{self.parameter}.{name}", getattr(self, name))

    def validate_rendered(self) -> None:
        """Check the fields that held a template, now rendered; the others were checked when the
        object was built."""
        self.validate(self.templated)


def _check_decoder(name: str, value: Any) -> object:
    return check_decoder(value)


@dataclass
class SparkRunner(_Group):
    """Load with Spark.

    :param master: ``local[*]`` (default) or ``local[N]``: Spark in the task's process, whose
        cores also find each plan's new cuts before the plan, in as many processes of the task
        (``core.plan_cuts``), and whose partitions each load their range groups in lanes. For a
        cluster give ``spark_conn_id`` or ``spark_connect_conn_id``. (templated)
    :param spark_conn_id: a ``spark`` connection (apache-spark provider): the job is submitted with
        ``spark-submit`` through ``SparkSubmitHook``, taking master, queue, ``spark-binary``, keytab
        and principal from the connection, in client deploy mode; the connection's password, if
        set, is the cluster's ``spark.authenticate`` secret (sent in a 0600 properties file).
    :param spark_connect_conn_id: a ``spark_connect`` connection: the job runs through Spark
        Connect, with the connection's host, port, user, token and ``use_ssl``.
    :param conf: Spark configuration. (templated)
    :param python: Python interpreter of the executors (default: the task's own).
    :param parallelism: Spark partitions at most (default: one per shard range; on a local
        master at most four per core, as each partition costs a Python task start and its clients).
    """

    master: str = "local[*]"
    spark_conn_id: str | None = None
    spark_connect_conn_id: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    python: str | None = None
    parallelism: int | None = None

    parameter: ClassVar[str] = "runner"
    template_fields: ClassVar[Sequence[str]] = ("master", "conf")
    checks: ClassVar[Mapping[str, Check]] = {
        "master": check_text,
        "spark_conn_id": check_optional_text,
        "spark_connect_conn_id": check_optional_text,
        "conf": partial(check_optional_mapping, text_values=True),
        "python": check_optional_text,
        "parallelism": partial(check_optional_whole_number, minimum=1),
    }

    def validate(self, names: Collection[str] | None = None) -> None:
        super().validate(names)
        if names is None and self.spark_conn_id and self.spark_connect_conn_id:
            raise ConfigurationError(
                "Give runner.spark_conn_id (spark-submit) or runner.spark_connect_conn_id (Spark Connect), not both"
            )
        # The master is the task's own Spark's only without a connection; a template is checked
        # once rendered.
        master_now = "master" in names if names is not None else "master" not in self.templated
        if master_now and not (self.spark_conn_id or self.spark_connect_conn_id):
            check_local_master(f"{self.parameter}.master", self.master)

    def describe(self) -> str:
        """The Spark load job, as a failure names it."""
        if self.spark_connect_conn_id:
            return f"the Spark load job (Spark Connect connection {self.spark_connect_conn_id!r})"
        if self.spark_conn_id:
            return f"the Spark load job (spark-submit through connection {self.spark_conn_id!r})"
        return f"the Spark load job (master {self.master})"


@dataclass
class InProcessRunner(_Group):
    """Load in the task's own process, without Spark: for small streams, where Spark's start-up
    (~15 s) dominates.

    :param lanes: range groups loaded at the same time (each holds at most two chunks in memory).
    :param processes: loader processes of the task's own, each with ``lanes`` lanes: at hundreds of
        shards one process's core (the GIL) bounds the loads' calls, so more processes load them
        side by side, without Spark's start (``core.loader_processes``). Only as many start as the
        range groups fill with lanes; with one, the lanes are the task process's own threads.
        Before the loads they also find the cuts of the interval's new ranges for the plan, which
        then reads no shard itself (``core.plan_cuts``).
    """

    lanes: int = DEFAULT_DRIVER_CONCURRENCY
    processes: int = 1

    parameter: ClassVar[str] = "runner"
    checks: ClassVar[Mapping[str, Check]] = {
        "lanes": partial(check_whole_number, minimum=1),
        "processes": partial(check_whole_number, minimum=1),
    }

    def describe(self) -> str:
        return "the load in the task's process (InProcessRunner)"


@dataclass
class SparkOrInProcess(_Group):
    """Decide per run: in the task's process when the run's estimated records are at most
    ``max_records``, with Spark otherwise. The decision and its inputs are logged and returned in
    XCom (``runner``).

    The estimate (``core.runner_choice``) reads no record. Each shard counts the largest of its
    latest loaded intervals' counts, at their rate over the run's interval when that is longer; a
    shard without counts counts at Kinesis's write limit (1,000 records/s) over the interval, and a
    TRIM_HORIZON pipeline's first range of a shard (its whole retention) at that limit over 365
    days. Its error: exact for steady traffic; low by the factor a shard's traffic grew past its
    busiest recent interval; high by the ratio of lengths for an interval shorter than the recent
    ones; the write-limit counts bound Kinesis records, so on KPL-aggregated streams a shard
    without counts may hold that many times the user records per aggregate.

    :param spark: how Spark runs when it is chosen.
    :param in_process: how the load runs in the task's process when that is chosen.
    :param max_records: the largest estimate loaded without Spark.
    """

    spark: SparkRunner = field(default_factory=SparkRunner)
    in_process: InProcessRunner = field(default_factory=InProcessRunner)
    max_records: int = DEFAULT_IN_PROCESS_MAX_RECORDS

    parameter: ClassVar[str] = "runner"
    template_fields: ClassVar[Sequence[str]] = ("spark",)
    checks: ClassVar[Mapping[str, Check]] = {"max_records": partial(check_whole_number, minimum=0)}

    def validate(self, names: Collection[str] | None = None) -> None:
        super().validate(names)
        if names is None:  # the runners checked their own fields when they were built
            for name, kind in (("spark", SparkRunner), ("in_process", InProcessRunner)):
                if not isinstance(getattr(self, name), kind):
                    raise ConfigurationError(f"runner.{name} must be a {kind.__name__}, got {getattr(self, name)!r}")

    def validate_rendered(self) -> None:
        if "spark" in self.templated:
            self.spark.validate_rendered()


RunnerConfig = Union[SparkRunner, InProcessRunner, SparkOrInProcess]
"""What the operator's ``runner`` takes."""


@dataclass
class MappingConfig(_Group):
    """How a record becomes a row, and where the records that cannot go.

    :param decoder: how a record's payload becomes rows (``core.decoders``): ``"json"`` (default,
        one JSON object), ``"gzip+json"`` (gzip of a JSON object; a CloudWatch Logs subscription
        envelope gives one row per log event: ``log_group``, ``log_stream``, ``owner``, ``id``,
        ``timestamp``, ``message``, and its control messages are counted as skipped), ``"csv"``
        (one row per CSV line, fields named by the table's columns from ``DESC``, or by
        ``load.options["columns"]``) or ``package.module:function`` taking the payload's bytes and
        returning a dict or an iterable of dicts (importable on Spark executors). Rows always go
        to Doris as JSON lines, so ``load.options`` with another ``format``, ``strip_outer_array``
        or ``read_json_by_line=False`` are refused.
    :param transform: ``package.module:function`` applied to each decoded JSON object (returns
        the row, or None to dead-letter it); importable on Spark executors.
    :param required_fields: JSON fields a record must have; others go to the dead letter.
    :param metadata_columns: Kinesis metadata added to every row: ``_kinesis_shard``,
        ``_kinesis_sequence``, ``_kinesis_arrival``, ``_kinesis_partition_key``.
    :param unique_key_sequence: for UNIQUE KEY tables: feed the record's arrival time to Doris's
        sequence column (``function_column.sequence_col``), so the newest value wins whatever
        order loads land in. Adds ``_kinesis_arrival`` to every row.
    :param dead_letter_table: table for records that cannot be decoded or mapped, default
        ``<table>_dead_letter`` (created if missing). (templated)
    :param dead_letter_table_properties: ``PROPERTIES`` of the dead-letter table when it is
        created, e.g. ``{"replication_num": "1"}`` on a cluster with fewer than three BEs.
    :param unmatched_fields: JSON members of the records that no column of the table takes (Doris
        drops them) and columns no record fills: ``"report"`` (default) loads and reports them
        (log, XCom ``unmatched_fields``, metric ``fields_without_column``); ``"fail"`` sends nothing
        of a chunk holding a member no column takes (``core.fields``).
    """

    decoder: str = JSON
    transform: str | None = None
    required_fields: Sequence[str] = ()
    metadata_columns: Sequence[str] = ()
    unique_key_sequence: bool = False
    dead_letter_table: str | None = None
    dead_letter_table_properties: Mapping[str, str] = field(default_factory=dict)
    unmatched_fields: str = "report"

    parameter: ClassVar[str] = "mapping"
    template_fields: ClassVar[Sequence[str]] = ("dead_letter_table",)
    checks: ClassVar[Mapping[str, Check]] = {
        "decoder": _check_decoder,
        "transform": check_optional_text,
        "required_fields": check_texts,
        "metadata_columns": check_texts,
        "unique_key_sequence": check_flag,
        "dead_letter_table": check_optional_text,
        "dead_letter_table_properties": partial(check_optional_mapping, text_values=True),
        "unmatched_fields": partial(check_choice, choices=list(UNMATCHED_FIELDS_CHOICES)),
    }

    @property
    def all_metadata_columns(self) -> tuple[str, ...]:
        """``metadata_columns``, with the arrival column the sequence column needs."""
        columns = tuple(self.metadata_columns)
        if self.unique_key_sequence and ARRIVAL_COLUMN not in columns:
            columns = (*columns, ARRIVAL_COLUMN)
        return columns


@dataclass
class ReadConfig(_Group):
    """How and when the stream is read.

    :param mode: ``"polling"`` (default): loaders read with GetRecords, sharing each shard's
        2 MiB/s and 5 calls/s with the stream's other consumers. ``"efo"``: enhanced fan-out,
        through a registered stream consumer with its own 2 MiB/s per shard, pushed by
        ``SubscribeToShard`` (registered if missing and kept across runs; see ``docs/efo.md``).
        Both modes cut the same ranges and load them under the same labels, so a run may replay
        in one mode what another loaded in the other.
    :param efo_consumer_name: the consumer's name with ``mode="efo"``; default
        ``kinesis-doris-<pipeline id>``. (templated)
    :param initial_position: ``INTERVAL`` (a shard's first range starts at its interval) or
        ``TRIM_HORIZON`` (the first run also loads everything still retained).
    :param take_over_from: the ``pipeline_id`` of a pipeline in the same checkpoint table that this
        new pipeline continues: its first run starts each shard at the cut where that pipeline's
        last interval ends, and that pipeline plans nothing after it (``core.handover``; README,
        "Moving to a new pipeline_id"). Only for a pipeline that has planned nothing yet.
    :param seal_grace: time after ``data_interval_end`` before the interval is read, to let
        in-flight records arrive.
    :param relaxed_order: load child shards without waiting for their parents (only for tables
        where order cannot matter: DUPLICATE KEY, or UNIQUE KEY with a sequence column).
    :param waiting_warn_after: a child shard that has waited for its parents longer than this
        (its run fails with ``ShardsWaiting`` and is retried) is logged as an error.
    """

    mode: Literal["polling", "efo"] = "polling"
    efo_consumer_name: str | None = None
    initial_position: str = InitialPosition.INTERVAL.value
    take_over_from: str | None = None
    seal_grace: timedelta = timedelta(seconds=60)
    relaxed_order: bool = False
    waiting_warn_after: timedelta = timedelta(hours=1)

    parameter: ClassVar[str] = "read"
    template_fields: ClassVar[Sequence[str]] = ("efo_consumer_name",)
    checks: ClassVar[Mapping[str, Check]] = {
        "mode": partial(check_choice, choices=["polling", "efo"]),
        "efo_consumer_name": check_optional_text,
        "initial_position": partial(check_choice, choices=[position.value for position in InitialPosition]),
        "take_over_from": check_pipeline_id,
        "seal_grace": check_duration,
        "relaxed_order": check_flag,
        "waiting_warn_after": check_duration,
    }

    def consumer_name(self, pipeline_id: str) -> str:
        """The enhanced fan-out consumer's name: ``efo_consumer_name``, else the pipeline's default."""
        return self.efo_consumer_name or consumer_name(pipeline_id)


@dataclass
class LoadConfig(_Group):
    """How rows go to Doris.

    :param options: Stream Load settings by field of ``StreamLoadOptions`` (``columns``,
        ``jsonpaths``, ``where``, ``max_filter_ratio``, ``strict_mode``, ``sequence_col``, ...).
        ``strict_mode`` is on unless set here: a value that does not convert to its column's type
        is a dead letter, not a silent NULL. (templated)
    :param headers: further Stream Load headers, e.g. ``{"timezone": "UTC"}``. (templated)
    :param chunk_max_rows: records per Stream Load request.
    :param chunk_max_bytes: bytes per Stream Load request.
    :param max_bad_record_ratio: rows Doris refuses (wrong type, too long, NULL in a NOT NULL
        column) become dead letters with Doris's reason; when more than this share of a chunk (and
        at least 10 rows) is refused, the task fails instead: the table and the records probably
        do not match.
    """

    options: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    chunk_max_rows: int = ChunkLimits.chunk_max_rows
    chunk_max_bytes: int = ChunkLimits.chunk_max_bytes
    max_bad_record_ratio: float = 0.5

    parameter: ClassVar[str] = "load"
    template_fields: ClassVar[Sequence[str]] = ("options", "headers")
    checks: ClassVar[Mapping[str, Check]] = {
        "options": check_optional_mapping,
        "headers": partial(check_optional_mapping, text_values=True),
        "chunk_max_rows": partial(check_whole_number, minimum=1),
        "chunk_max_bytes": partial(check_whole_number, minimum=1),
        "max_bad_record_ratio": check_ratio,
    }

    def __post_init__(self) -> None:
        options = self.options if isinstance(self.options, Mapping) else {}  # a wrong type is refused below
        self.templated_options = frozenset(name for name, value in options.items() if holds_template(value))
        """The ``options`` whose values rendering can change, as the object was built."""
        super().__post_init__()


@dataclass
class StateConfig(_Group):
    """How the checkpoint table is kept, and which intervals a run loads besides its own.

    :param create_checkpoint_table: create the DynamoDB table (on-demand billing) if missing.
    :param prune: once an hour, one run deletes the checkpoint table's history of each shard that
        is loaded and older than the stream's retention plus Doris's label window
        (``core.prune``), so the table does not grow with the pipeline's age. False keeps
        everything (the table then grows by a few items per shard and interval).
    :param driver_concurrency: shards whose planning, empty check and commit (DynamoDB and Kinesis
        calls in the task's process) run at the same time. Raise it for streams of hundreds of
        shards; throttled calls are retried with backoff by botocore.
    :param load_skipped_intervals: intervals of the DAG's timetable that no DAG run covers (a
        pause or scheduler downtime with ``catchup=False``, a manual run holding a logical date)
        and that lie between intervals this pipeline loaded, or between those and this run's, are
        loaded by this run first, oldest first, each under its own interval (a later backfill of
        one replays it). An interval whose DAG run exists is left to that run. ``False``: fail
        naming them and the backfill commands instead. See the README, "Intervals Airflow did
        not run".
    :param max_skipped_intervals: skipped intervals one run loads at most; the next run goes on.
    :param require_label_window_check: a Doris label window the preflight cannot read (the
        connection's user lacks ADMIN, as a least-privilege loader does) fails the task before
        planning. False (default): the run-time canary checks it (``core.label_window``), which
        notices a window shorter than ``label_keep_seconds`` at the first run more than that
        window after a load (docs/production.md, "Doris privileges").
    """

    create_checkpoint_table: bool = True
    prune: bool = True
    driver_concurrency: int = DEFAULT_DRIVER_CONCURRENCY
    load_skipped_intervals: bool = True
    max_skipped_intervals: int = DEFAULT_MAX_SKIPPED_INTERVALS
    require_label_window_check: bool = False

    parameter: ClassVar[str] = "state"
    checks: ClassVar[Mapping[str, Check]] = {
        "create_checkpoint_table": check_flag,
        "prune": check_flag,
        "driver_concurrency": partial(check_whole_number, minimum=1),
        "load_skipped_intervals": check_flag,
        "max_skipped_intervals": partial(check_whole_number, minimum=1),
        "require_label_window_check": check_flag,
    }


GROUPS: Mapping[str, tuple[type[_Group], ...]] = {
    "runner": (SparkRunner, InProcessRunner, SparkOrInProcess),
    "mapping": (MappingConfig,),
    "read": (ReadConfig,),
    "load": (LoadConfig,),
    "state": (StateConfig,),
}
"""The operator's grouped parameters and the classes each takes."""


def check_group(parameter: str, value: Any) -> Any:
    """``value`` if it is one of the classes ``parameter`` takes (which checked their own fields
    when they were built).

    :raises ConfigurationError: another type.
    """
    kinds = GROUPS[parameter]
    if not isinstance(value, kinds):
        names = " or ".join(kind.__name__ for kind in kinds)
        raise ConfigurationError(f"{parameter} must be a {names}, got {value!r}")
    return value


def check_rendered_group(parameter: str, value: Any) -> Any:
    """``value`` if it is one of the classes ``parameter`` takes (Jinja's native rendering could
    replace it), its templated fields checked now that they are rendered.

    :raises ConfigurationError: another type, or a bad rendered field.
    """
    check_group(parameter, value).validate_rendered()
    return value


def check_groups_together(mapping: MappingConfig, load: LoadConfig, *, rendered: bool) -> None:
    """The checks that need two groups: Stream Load options that contradict the JSON lines every
    decoder sends.

    :param rendered: False at parse time, when values holding ``{{`` are left for later; True
        once rendered, when only those are checked (the decoder is never a template).
    """
    if not rendered:
        check_load_options(load.options, mapping.decoder, skip_templates=True)
    elif "options" in load.templated:
        # The options as built, to know which held a template: rendering set the rendered ones.
        check_load_options({name: load.options[name] for name in load.templated_options}, mapping.decoder)


def group_field_names(kind: type[_Group]) -> tuple[str, ...]:
    """The fields a user sets on ``kind``, in order (docs/parameters.md's table lists them)."""
    return tuple(item.name for item in fields(kind))  # type: ignore[arg-type]
