"""``KinesisToDorisOperator``: load one data interval of a Kinesis stream into a Doris table,
exactly once.

Seal → plan → read + load (Spark) → commit. See the README for the walk-through and the
guarantees, and ``docs/checkpoints.md`` for the checkpoint table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from airflow.providers.common.compat.sdk import AirflowException, BaseOperator, conf
from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoCheckpointStore
from airflow_provider_kinesis_doris.core.chunks import ChunkLimits
from airflow_provider_kinesis_doris.core.decoders import CSV, JSON, check_decoder, check_load_options, plain_columns
from airflow_provider_kinesis_doris.core.doris.identifiers import check_name, split_table_name
from airflow_provider_kinesis_doris.core.errors import (
    CheckpointConflict,
    ConfigurationError,
    DataTrimmed,
    LabelWindowBroken,
    PermanentStreamLoadError,
    Phase,
    ShardsWaiting,
    UnresolvableLoad,
    aws_error_code,
    failed_phase,
    readme_section,
)
from airflow_provider_kinesis_doris.core.load_job import DRIVER_CREDENTIALS, Credentials, LoadJob, check_executor_credentials
from airflow_provider_kinesis_doris.core.catch_up import DEFAULT_MAX_SKIPPED_INTERVALS
from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY
from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig, run_here, run_interval
from airflow_provider_kinesis_doris.core.runner_choice import DEFAULT_IN_PROCESS_MAX_RECORDS, SPARK, AutoRunner
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig
from airflow_provider_kinesis_doris.core.doris.preflight import DorisPreflightSettings, PreflightReport
from airflow_provider_kinesis_doris.core.aws_preflight import AwsPreflightSettings, aws_preflight, preflight_digest
from airflow_provider_kinesis_doris.core.kinesis.consumer import consumer_name
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.assets.doris import create_asset
from airflow_provider_kinesis_doris.hooks.doris import DorisHook
from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook
from airflow_provider_kinesis_doris.operators.dag_runs import catch_up_for
from airflow_provider_kinesis_doris.operators.loader_arguments import (
    PARSE_TIME_CHECKS,
    RENDERED_CHECKS,
    check_arguments,
)
from airflow_provider_kinesis_doris.operators.spark_connections import LoadJobSubmitter, spark_connect_url
from airflow_provider_kinesis_doris.links.doris import DorisTableLink
from airflow_provider_kinesis_doris.metrics import emit_interval_metrics, emit_label_window_broken
from airflow_provider_kinesis_doris.operators.pipeline_arguments import PipelineArgumentsMixin
from airflow_provider_kinesis_doris.version_compat import (
    AIRFLOW_V_3_0_PLUS,
    AirflowRescheduleException,
    DateTimeTrigger,
)

if TYPE_CHECKING:
    import jinja2
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_kinesis_doris.core.report import RangeReport
    from airflow_provider_kinesis_doris.spark.runner import SparkSettings


class KinesisToDorisOperator(PipelineArgumentsMixin, BaseOperator):
    """Load the records that arrived in ``[data_interval_start, data_interval_end)`` on a Kinesis
    stream into a Doris table, exactly once across retries, reruns, backfills and reshards.

    The interval is loaded once it is sealed (``data_interval_end + seal_grace`` has passed);
    until then the task defers (``deferrable=True``) or reschedules itself. Each run plans per
    shard a range of records and persists it in DynamoDB, reads and Stream Loads the ranges with
    Spark, and moves the checkpoints only after Doris reports the data visible.

    .. seealso::
        Doris Stream Load: https://doris.apache.org/docs/data-operate/import/import-way/stream-load-manual

    :param stream_name: the Kinesis stream. (templated)
    :param doris_table: the target, ``database.table``. (templated)
    :param checkpoint_table: the DynamoDB table holding ranges, boundaries, chunk intents and
        checkpoints; shared by pipelines. (templated)
    :param pipeline_id: identity of this stream→table load in the checkpoint table and in the
        labels; default ``<stream_name>.<doris_table>``. Changing it starts a new pipeline. (templated)
    :param aws_conn_id: AWS connection (credentials, region, ``endpoint_url`` extras).
    :param region_name: AWS region; the connection's by default.
    :param verify: whether to verify TLS certificates, or a CA bundle path (which must exist on
        Spark executors too); the connection's by default.
    :param botocore_config: ``botocore.config.Config`` arguments (retries, proxies, timeouts),
        instead of the connection's ``config_kwargs``; the task's and the executors' clients use them.
    :param executor_credentials: how the loaders (Spark executors, or the task's process with
        ``use_spark=False``) get AWS credentials: ``"driver"`` (default): the connection's,
        resolved once when the task starts and shipped in the 0600 credentials file (temporary
        credentials expire with their session); ``"default_chain"``: their own (instance profile,
        IRSA, environment), nothing AWS is shipped; or an IAM role ARN they assume with their own
        credentials, refreshed before it expires. See ``docs/production.md``.
    :param doris_conn_id: ``doris`` connection.
    :param initial_position: ``INTERVAL`` (a shard's first range starts at its interval) or
        ``TRIM_HORIZON`` (the first run also loads everything still retained).
    :param seal_grace: time after ``data_interval_end`` before the interval is loaded, to let
        in-flight records arrive.
    :param chunk_max_rows: records per Stream Load request.
    :param chunk_max_bytes: bytes per Stream Load request.
    :param load_options: Stream Load settings by field of ``StreamLoadOptions`` (``columns``,
        ``jsonpaths``, ``where``, ``max_filter_ratio``, ``strict_mode``, ``sequence_col``, ...).
        ``strict_mode`` is on unless set here: a value that does not convert to its column's type
        is a dead letter, not a silent NULL. (templated)
    :param max_bad_record_ratio: rows Doris refuses (wrong type, too long, NULL in a NOT NULL
        column) become dead letters with Doris's reason; when more than this share of a chunk (and
        at least 10 rows) is refused, the task fails instead: the table and the records probably
        do not match.
    :param load_headers: further Stream Load headers, e.g. ``{"timezone": "UTC"}``. (templated)
    :param metadata_columns: Kinesis metadata added to every row: ``_kinesis_shard``,
        ``_kinesis_sequence``, ``_kinesis_arrival``, ``_kinesis_partition_key``.
    :param required_fields: JSON fields a record must have; others go to the dead letter.
    :param transform: ``package.module:function`` applied to each decoded JSON object (returns
        the row, or None to dead-letter it); importable on Spark executors.
    :param decoder: how a record's payload becomes rows (``core.decoders``): ``"json"`` (default,
        one JSON object), ``"gzip+json"`` (gzip of a JSON object; a CloudWatch Logs subscription
        envelope gives one row per log event: ``log_group``, ``log_stream``, ``owner``, ``id``,
        ``timestamp``, ``message``, and its control messages are counted as skipped), ``"csv"``
        (one row per CSV line, fields named by the table's columns from ``DESC``, or by
        ``load_options["columns"]``) or ``package.module:function`` taking the payload's bytes and
        returning a dict or an iterable of dicts (importable on Spark executors). Rows always go
        to Doris as JSON lines, so ``load_options`` with another ``format``, ``strip_outer_array``
        or ``read_json_by_line=False`` are refused.
    :param unique_key_sequence: for UNIQUE KEY tables: feed the record's arrival time to Doris's
        sequence column (``function_column.sequence_col``), so the newest value wins whatever
        order loads land in. Adds ``_kinesis_arrival`` to every row.
    :param dead_letter_table: table for records that cannot be decoded or mapped, default
        ``<table>_dead_letter`` (created if missing). (templated)
    :param dead_letter_table_properties: ``PROPERTIES`` of the dead-letter table when it is
        created, e.g. ``{"replication_num": "1"}`` on a cluster with fewer than three BEs.
    :param relaxed_order: load child shards without waiting for their parents (only for tables
        where order cannot matter: DUPLICATE KEY, or UNIQUE KEY with a sequence column).
    :param waiting_warn_after: a child shard that has waited for its parents longer than this
        (its run fails with ``ShardsWaiting`` and is retried) is logged as an error.
    :param read_mode: ``"polling"`` (default): loaders read with GetRecords, sharing each shard's
        2 MiB/s and 5 calls/s with the stream's other consumers. ``"efo"``: enhanced fan-out, through
        a registered stream consumer with its own 2 MiB/s per shard, pushed by ``SubscribeToShard``
        (registered if missing and kept across runs; see ``docs/efo.md``). Both modes cut the same
        ranges and load them under the same labels, so a run may replay in one mode what another
        loaded in the other.
    :param efo_consumer_name: the consumer's name with ``read_mode="efo"``; default
        ``kinesis-doris-<pipeline id>``. (templated)
    :param use_spark: load with Spark (default). ``False`` loads the ranges in the task's own
        process, ``driver_concurrency`` range groups at a time (each holds at most two chunks in
        memory): for small streams, where Spark's start-up (~15 s) dominates. ``"auto"`` decides
        per run: in process when the run's estimated records are at most
        ``in_process_max_records``, with Spark otherwise (``core.runner_choice``: the estimate
        comes from each shard's latest loaded intervals; a shard without any counts at Kinesis's
        write limit). The decision and its inputs are logged and returned in XCom (``runner``).
    :param in_process_max_records: with ``use_spark="auto"``, the largest estimate loaded without
        Spark (default 500,000).
    :param spark_master: ``local[*]`` (default) or ``local[N]``: Spark in the task's process. For a
        cluster use ``spark_conn_id`` or ``spark_connect_conn_id``. (templated)
    :param spark_conn_id: a ``spark`` connection (apache-spark provider): the job is submitted with
        ``spark-submit`` through ``SparkSubmitHook``, taking master, queue, ``spark-binary``, keytab
        and principal from the connection, in client deploy mode; the connection's password, if
        set, is the cluster's ``spark.authenticate`` secret (sent in a 0600 properties file).
        ``spark_master`` is then unused.
    :param spark_connect_conn_id: a ``spark_connect`` connection: the job runs through Spark
        Connect, with the connection's host, port, user, token and ``use_ssl``.
    :param spark_conf: Spark configuration. (templated)
    :param spark_python: Python interpreter of the executors (default: the task's own).
    :param parallelism: Spark partitions at most (default: one per shard range).
    :param driver_concurrency: shards whose planning, empty check and commit (DynamoDB and Kinesis
        calls in the task's process) run at the same time, and range groups loaded at the same time
        with ``use_spark=False``. Raise it for streams of hundreds of shards; throttled calls are
        retried with backoff by botocore.
    :param prune_state: once an hour, one run deletes the checkpoint table's history of each shard
        that is loaded and older than the stream's retention plus Doris's label window
        (``core.prune``), so the table does not grow with the pipeline's age. Set False to keep
        everything (the table then grows by a few items per shard and interval).
    :param create_checkpoint_table: create the DynamoDB table (on-demand billing) if missing.
    :param load_skipped_intervals: intervals of the DAG's timetable that no DAG run covers (a
        pause or scheduler downtime with ``catchup=False``, a manual run holding a logical date)
        and that lie between intervals this pipeline loaded, or between those and this run's, are
        loaded by this run first, oldest first, each under its own interval (a later backfill of
        one replays it). An interval whose DAG run exists is left to that run. ``False``: fail
        naming them and the backfill commands instead. See the README, "Intervals Airflow did not run".
    :param max_skipped_intervals: skipped intervals one run loads at most; the next run goes on.
    :param deferrable: wait for the seal in the triggerer instead of rescheduling.
    """

    template_fields: Sequence[str] = (
        *PipelineArgumentsMixin.template_fields,
        "dead_letter_table",
        "efo_consumer_name",
        "load_options",
        "load_headers",
        "spark_master",
        "spark_conf",
    )
    template_fields_renderers = {"load_options": "json", "load_headers": "json", "spark_conf": "json"}
    operator_extra_links = (DorisTableLink(),)
    ui_color = "#d4e9f7"

    def __init__(
        self,
        *,
        stream_name: str,
        doris_table: str,
        checkpoint_table: str,
        pipeline_id: str | None = None,
        aws_conn_id: str | None = KinesisPipelineHook.default_conn_name,
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
        executor_credentials: str = DRIVER_CREDENTIALS,
        doris_conn_id: str = DorisHook.default_conn_name,
        initial_position: str = "INTERVAL",
        seal_grace: timedelta = timedelta(seconds=60),
        chunk_max_rows: int = ChunkLimits.max_rows,
        chunk_max_bytes: int = ChunkLimits.max_bytes,
        load_options: Mapping[str, Any] | None = None,
        load_headers: Mapping[str, str] | None = None,
        max_bad_record_ratio: float = 0.5,
        metadata_columns: Sequence[str] = (),
        required_fields: Sequence[str] = (),
        transform: str | None = None,
        decoder: str = JSON,
        unique_key_sequence: bool = False,
        dead_letter_table: str | None = None,
        dead_letter_table_properties: Mapping[str, str] | None = None,
        relaxed_order: bool = False,
        waiting_warn_after: timedelta = timedelta(hours=1),
        read_mode: Literal["polling", "efo"] = "polling",
        efo_consumer_name: str | None = None,
        use_spark: bool | Literal["auto"] = True,
        in_process_max_records: int = DEFAULT_IN_PROCESS_MAX_RECORDS,
        spark_master: str = "local[*]",
        spark_conn_id: str | None = None,
        spark_connect_conn_id: str | None = None,
        spark_conf: Mapping[str, str] | None = None,
        spark_python: str | None = None,
        parallelism: int | None = None,
        driver_concurrency: int = DEFAULT_DRIVER_CONCURRENCY,
        prune_state: bool = True,
        create_checkpoint_table: bool = True,
        load_skipped_intervals: bool = True,
        max_skipped_intervals: int = DEFAULT_MAX_SKIPPED_INTERVALS,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        # Every argument by the name it has in the signature: a bad literal fails the DAG's parse
        # naming it, instead of the run (e.g. seal_grace=5 at the first ``end + seal_grace``).
        check_arguments(PARSE_TIME_CHECKS, locals())
        super().__init__(
            stream_name=stream_name, checkpoint_table=checkpoint_table, pipeline_id=pipeline_id,
            doris_table=doris_table, aws_conn_id=aws_conn_id, region_name=region_name, verify=verify,
            botocore_config=botocore_config, **kwargs,
        )  # fmt: skip
        check_executor_credentials(executor_credentials)
        self.executor_credentials = executor_credentials
        self.doris_conn_id = doris_conn_id
        self.initial_position = initial_position
        self.seal_grace = seal_grace
        self.chunk_limits = ChunkLimits(max_rows=chunk_max_rows, max_bytes=chunk_max_bytes)
        self.load_options = dict(load_options or {})
        self.load_headers = dict(load_headers or {})
        self.max_bad_record_ratio = max_bad_record_ratio
        self.metadata_columns = tuple(metadata_columns)
        self.required_fields = tuple(required_fields)
        self.transform = transform
        self.decoder = check_decoder(decoder)
        # Checked again once templates are rendered; a literal contradiction fails the DAG's parse.
        check_load_options(self.load_options, self.decoder, skip_templates=True)
        self.unique_key_sequence = unique_key_sequence
        self.dead_letter_table = dead_letter_table
        if "{{" not in doris_table and "{{" not in (dead_letter_table or ""):
            # Literal names fail the DAG's parse; templated ones when the task runs.
            database, table, _ = self._table_names()
            if "outlets" not in kwargs:
                self.outlets = [create_asset(database=database, table=table, conn_id=doris_conn_id)]
        self.dead_letter_table_properties = dict(dead_letter_table_properties or {})
        self.relaxed_order = relaxed_order
        self.waiting_warn_after = waiting_warn_after
        self.read_mode = read_mode
        self.efo_consumer_name = efo_consumer_name
        self.use_spark = use_spark
        self.in_process_max_records = in_process_max_records
        self.spark_master = spark_master
        if spark_conn_id and spark_connect_conn_id:
            raise ConfigurationError("Give spark_conn_id (spark-submit) or spark_connect_conn_id (Spark Connect), not both")
        self.spark_conn_id = spark_conn_id
        self.spark_connect_conn_id = spark_connect_conn_id
        self._submitter: LoadJobSubmitter | None = None
        self.spark_conf = dict(spark_conf or {})
        self.spark_python = spark_python
        self.parallelism = parallelism
        self.driver_concurrency = driver_concurrency
        self.prune_state = prune_state
        self.create_checkpoint_table = create_checkpoint_table
        self.load_skipped_intervals = load_skipped_intervals
        self.max_skipped_intervals = max_skipped_intervals
        self.deferrable = deferrable
        self._run_totals: dict[str, Any] | None = None
        self._stream_arn: str | None = None

    def render_template_fields(self, context: Context, jinja_env: jinja2.Environment | None = None) -> None:
        super().render_template_fields(context, jinja_env)
        # Only now are the templated values known: a bad one fails before anything is looked up.
        check_arguments(RENDERED_CHECKS, {name: getattr(self, name) for name in RENDERED_CHECKS})

    # -- seal -------------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        start, end = _interval(context)
        sealed_at = end + self.seal_grace
        now = datetime.now(timezone.utc)
        if now < sealed_at:
            self.log.info("Interval [%s, %s) is sealed at %s; waiting", start.isoformat(), end.isoformat(), sealed_at)
            if self.deferrable:
                self.defer(trigger=DateTimeTrigger(moment=sealed_at), method_name="execute_sealed")
            raise AirflowRescheduleException(sealed_at)
        return self._load(context, start, end)

    def execute_sealed(self, context: Context, event: Any = None) -> dict[str, Any]:
        """Resumed by the trigger once the interval is sealed."""
        start, end = _interval(context)
        return self._load(context, start, end)

    # -- plan → load → commit ---------------------------------------------------------------------

    def _load(self, context: Context, start: datetime, end: datetime) -> dict[str, Any]:
        from airflow_provider_kinesis_doris.spark.runner import check_prerequisites, run_spark_job

        try:
            # Before any connection is looked up or any statement runs: the names are templated
            # (a DAG run's conf can set them) and reach SQL and Stream Load URLs.
            database, table, dead_letter_table = self._table_names()
            load_options = self._load_options()
        except ConfigurationError as exc:
            raise AirflowException(f"The operator's settings are invalid; nothing was planned or loaded: {exc}") from exc
        aws_hook = self.aws_hook
        doris_hook = DorisHook(doris_conn_id=self.doris_conn_id)
        doris_config = doris_hook.connection_config()
        DorisTableLink.persist(context, doris_config.fe_url, database, table)
        try:
            # A spark connection is looked up only for a run that may start Spark.
            settings = self._spark_settings() if self.use_spark else None
            csv_columns = self._csv_columns(doris_hook, database, table, load_options)
            config = self._pipeline_config(
                aws_hook, doris_config, database, table,
                dead_letter_table=dead_letter_table, load_options=load_options, csv_columns=csv_columns,
            )  # fmt: skip
            if self.use_spark is True:
                check_prerequisites(settings)  # "auto" checks only if it chooses Spark
        except ConfigurationError as exc:
            raise AirflowException(f"The operator's settings are invalid; nothing was planned or loaded: {exc}") from exc
        try:
            store = aws_hook.checkpoint_store(self.checkpoint_table, config.pipeline_id)
            config = self._prepare(aws_hook, doris_hook, store, config)
        except AirflowException:
            raise
        except Exception as exc:
            # An AWS or Doris error of its own (a wrong endpoint, credentials) still names the step.
            raise AirflowException(_explain_failure(exc, PREPARING_FAILED)) from exc

        def spark(job: LoadJob, credentials: Credentials) -> Sequence[RangeReport]:
            return run_spark_job(job, credentials, settings)  # type: ignore[arg-type]

        in_process = partial(run_here, lanes=self.driver_concurrency)
        auto = AutoRunner(store, spark=spark, in_process=in_process, max_records=self.in_process_max_records,
                          concurrency=self.driver_concurrency) if self.use_spark == "auto" else None  # fmt: skip
        runner = auto or (spark if self.use_spark else in_process)
        try:
            result = run_interval(
                config, _ms(start), _ms(end),
                kinesis=aws_hook.kinesis, store=store,
                credentials=aws_hook.load_job_credentials(doris_config.password, self.executor_credentials),
                runner=runner, warn_waiting_after_ms=int(self.waiting_warn_after.total_seconds() * 1000),
                driver_concurrency=self.driver_concurrency, prune_state=self.prune_state,
                catch_up=catch_up_for(context, load=self.load_skipped_intervals, max_intervals=self.max_skipped_intervals),
            )  # fmt: skip
        except ShardsWaiting as exc:
            # The failed try still tells, in XCom, which shards wait for which parents, and its
            # metrics and lineage count what it loaded of the rest.
            context["ti"].xcom_push(key="waiting", value={shard: list(parents) for shard, parents in exc.waiting.items()})
            self._report(config.pipeline_id, exc.result.summary())  # its metrics count the waiting shards
            raise AirflowException(_explain_waiting(exc, context["dag"].dag_id, end - start)) from exc
        except Exception as exc:
            if isinstance(exc, LabelWindowBroken):
                emit_label_window_broken(config.pipeline_id)
            raise AirflowException(_explain_failure(exc, self._failed_step(exc, auto))) from exc
        if result.commit is None:
            self.log.info("Nothing to load for this interval: no readable shard range; Spark was not started")
        self._report(config.pipeline_id, result.summary())
        summary = result.xcom_summary()
        if auto is not None and auto.choice is not None:
            summary["runner"] = auto.choice.summary()
        return summary

    def _report(self, pipeline_id: str, totals: dict[str, Any]) -> None:
        """Log each shard's line, send the run's metrics and keep its totals for lineage."""
        for shard_id, shard in totals["shards"].items():
            self.log.info("shard %s: %s", shard_id, shard)
        skipped = totals["skipped_intervals"]
        for recovered in skipped["loaded"]:
            self.log.warning("loaded interval %s, which no DAG run covered: %s", recovered["interval"], recovered)
        emit_interval_metrics(pipeline_id, totals)
        self._run_totals = totals

    # -- lineage ----------------------------------------------------------------------------------

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The stream and the table this run loads, without counts (``lineage`` names them)."""
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The stream, the table and, when the run sent rows to it, the dead-letter table, with
        what the run read and loaded and the tables' columns."""
        return self._lineage(self._run_totals, with_schema=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """As on completion, with what a run that failed with ``ShardsWaiting`` loaded of the
        rest (no counts otherwise), and without asking Doris for the columns."""
        return self._lineage(self._run_totals)

    def _lineage(self, totals: dict[str, Any] | None, *, with_schema: bool = False) -> OperatorLineage:
        from airflow_provider_kinesis_doris.lineage import loader_lineage

        database, table, dead_letter_table = self._table_names()
        if self._stream_arn is None:  # asked once per task: on start, reused on completion
            summary = self.aws_hook.kinesis.describe_stream_summary(StreamName=self.stream_name)
            self._stream_arn = summary["StreamDescriptionSummary"]["StreamARN"]
        dead_lettered = bool(totals and totals.get("dead_lettered"))
        hook = DorisHook(doris_conn_id=self.doris_conn_id) if with_schema else None
        return loader_lineage(
            stream_arn=self._stream_arn, doris_conn_id=self.doris_conn_id, database=database, table=table,
            dead_letter_table=dead_letter_table, totals=totals,
            columns=hook.column_types(database, table) if hook else (),
            dead_letter_columns=hook.column_types(database, dead_letter_table) if hook and dead_lettered else (),
        )  # fmt: skip

    def _pipeline_config(
        self, aws_hook: KinesisPipelineHook, doris_config: DorisConnectionConfig, database: str, table: str, *,
        dead_letter_table: str, load_options: StreamLoadOptions, csv_columns: tuple[str, ...] | None,
    ) -> PipelineConfig:  # fmt: skip
        """The pipeline's settings, with the transform and the decoder imported (before anything
        is planned)."""
        return PipelineConfig(
            pipeline_id=self.resolved_pipeline_id,
            stream_name=self.stream_name,
            checkpoint_table=self.checkpoint_table,
            doris_database=database,
            doris_table=table,
            dead_letter_table=dead_letter_table,
            doris=replace(doris_config, password=""),
            aws=aws_hook.aws_settings(self.executor_credentials),
            load_options=load_options,
            decoder=self.decoder,
            csv_columns=csv_columns,
            max_bad_record_ratio=self.max_bad_record_ratio,
            mapping=RecordMapping(metadata_columns=self._metadata_columns(), required_fields=self.required_fields),
            transform_path=self.transform,
            chunk_limits=self.chunk_limits,
            initial_position=self.initial_position,
            relaxed_order=self.relaxed_order,
            parallelism=self.parallelism,
        )

    def _prepare(
        self, aws_hook: KinesisPipelineHook, doris_hook: DorisHook, store: DynamoCheckpointStore, config: PipelineConfig
    ) -> PipelineConfig:
        """Before planning: the checkpoint table, the preflight, the Doris tables, the stream
        consumer; ``config`` with the consumer's ARN when the pipeline reads with enhanced fan-out."""
        if self.create_checkpoint_table:
            store.create_table_if_missing()
        self._preflight(doris_hook, store, config)
        try:
            doris_hook.ensure_dead_letter_table(
                config.doris_database, config.doris_table, config.dead_letter_table, self.dead_letter_table_properties
            )
        except ConfigurationError as exc:
            raise AirflowException(str(exc)) from exc
        if self.read_mode == "efo":
            return replace(config, efo_consumer_arn=self._efo_consumer(aws_hook, config.pipeline_id))
        return config

    def _efo_consumer(self, aws_hook: KinesisPipelineHook, pipeline_id: str) -> str:
        name = self._efo_consumer_name(pipeline_id)
        try:
            return aws_hook.register_consumer(self.stream_name, name)
        except Exception as exc:
            raise AirflowException(
                f"Registering the stream consumer {name!r} for read_mode='efo' failed; nothing was planned or loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _spark_settings(self) -> SparkSettings:
        """How to run the Spark job; a submitter is kept for ``on_kill``."""
        from airflow_provider_kinesis_doris.spark.runner import SparkSettings

        if self.spark_conn_id:
            self._submitter = LoadJobSubmitter(self.spark_conn_id)
        submitter = self._submitter
        return SparkSettings(
            master=self.spark_master,
            remote=spark_connect_url(self.spark_connect_conn_id) if self.spark_connect_conn_id else None,
            submitter=submitter,
            conf=self.spark_conf,
            python=self.spark_python,
            auth_secret=submitter.auth_secret if submitter else "",
        )

    def _failed_step(self, exc: BaseException, auto: AutoRunner | None) -> str:
        """The step of the run that raised ``exc``, as its message names it."""
        phase = failed_phase(exc)
        if phase is Phase.COMMITTING:
            return COMMIT_FAILED
        if phase is Phase.PLANNING:
            return PLANNING_FAILED
        with_spark = auto.choice.runner == SPARK if auto is not None and auto.choice is not None else self.use_spark
        what = self._spark_step() if with_spark else f"the load in the task's process (use_spark={self.use_spark!r})"
        return f"{what[0].upper()}{what[1:]} failed"

    def _spark_step(self) -> str:
        if self.spark_connect_conn_id:
            return f"the Spark load job (Spark Connect connection {self.spark_connect_conn_id!r})"
        if self.spark_conn_id:
            return f"the Spark load job (spark-submit through connection {self.spark_conn_id!r})"
        return f"the Spark load job (master {self.spark_master})"

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` (and its application on YARN or Kubernetes)."""
        if self._submitter is not None:
            self._submitter.on_kill()

    def _table_names(self) -> tuple[str, str, str]:
        """``doris_table``'s database and table and the dead-letter table, each a name Doris could
        have (``core.doris.identifiers``, which says which rule and why).

        :raises ConfigurationError: naming the argument and what is wrong with the name.
        """
        database, table = split_table_name(self.doris_table)
        check_name(database, f"doris_table {self.doris_table!r}, its database")
        check_name(table, f"doris_table {self.doris_table!r}, its table")
        if self.dead_letter_table is None:
            dead_letter_table = check_name(f"{table}_dead_letter", "dead_letter_table (default '<table>_dead_letter')")
        else:
            dead_letter_table = check_name(self.dead_letter_table, "dead_letter_table")
        return database, table, dead_letter_table

    def _csv_columns(
        self, hook: DorisHook, database: str, table: str, options: StreamLoadOptions
    ) -> tuple[str, ...] | None:
        """The field names of ``decoder="csv"``: ``load_options["columns"]``'s plain names, else
        the table's columns from ``DESC`` without the metadata columns."""
        if self.decoder != CSV:
            return None
        if options.columns:
            return plain_columns(options.columns)
        try:
            described = hook.column_types(database, table)
        except Exception as exc:
            raise AirflowException(
                f"decoder='csv' names its fields by the columns of Doris table {database}.{table}, and DESC of it "
                f"failed (does the table exist?); nothing was planned or loaded: {type(exc).__name__}: {exc}"
            ) from exc
        metadata = set(self._metadata_columns())
        return tuple(name for name, _ in described if name not in metadata)

    def _load_options(self) -> StreamLoadOptions:
        check_load_options(self.load_options, self.decoder)
        options: dict[str, Any] = {"format": "json", "read_json_by_line": True, "strict_mode": True, **self.load_options}
        for name in ("columns", "jsonpaths"):
            if options.get(name) is not None:
                options[name] = tuple(options[name])
        if self.unique_key_sequence:
            options.setdefault("sequence_col", "_kinesis_arrival")
        try:
            return StreamLoadOptions(**options, extra_headers=self.load_headers)
        except TypeError as exc:
            raise AirflowException(f"load_options: {exc}; see StreamLoadOptions for the accepted names") from exc

    def _metadata_columns(self) -> tuple[str, ...]:
        columns = self.metadata_columns
        if self.unique_key_sequence and "_kinesis_arrival" not in columns:
            columns = (*columns, "_kinesis_arrival")
        return columns

    def _preflight(self, hook: DorisHook, store: DynamoCheckpointStore, config: PipelineConfig) -> None:
        """Check the Doris and AWS deployment against the pipeline's settings before its first
        load and whenever they change (the checkpoint table keeps the digest of those that
        passed): what breaks exactly-once fails the task before anything is planned, the rest is
        logged."""
        doris_settings, aws_settings = self._preflight_settings(config)
        digest = preflight_digest(doris_settings, aws_settings)
        if _passed_preflight_digest(store) == digest:
            return
        report = self._preflight_report(hook, doris_settings, aws_settings)
        for item in report.warnings:
            self.log.warning("Preflight: %s", item.line())
        if report.fatal:
            wrong = "\n".join(item.line() for item in report.fatal)
            raise AirflowException(
                f"The Doris or AWS deployment breaks what exactly-once assumes; nothing was planned or loaded. "
                f"{report.text().splitlines()[0]}:\n{wrong}"
            )
        self.log.info("%s; settings %s recorded as checked", report.text().splitlines()[0], digest[:12])
        store.record_passed_preflight(digest)

    def check_deployment(self) -> PreflightReport:
        """Both halves of the preflight for this task's settings, as its next run would make them
        and whether or not they passed before (``python -m airflow_provider_kinesis_doris check``).
        Nothing is created, planned or loaded; templated arguments are taken as written."""
        try:
            database, table, dead_letter_table = self._table_names()
            load_options = self._load_options()
            doris_hook = DorisHook(doris_conn_id=self.doris_conn_id)
            config = self._pipeline_config(
                self.aws_hook, doris_hook.connection_config(), database, table,
                dead_letter_table=dead_letter_table, load_options=load_options,
                csv_columns=self._csv_columns(doris_hook, database, table, load_options),
            )  # fmt: skip
        except ConfigurationError as exc:
            raise AirflowException(f"The operator's settings are invalid: {exc}") from exc
        return self._preflight_report(doris_hook, *self._preflight_settings(config))

    def _preflight_settings(self, config: PipelineConfig) -> tuple[DorisPreflightSettings, AwsPreflightSettings]:
        doris = DorisPreflightSettings.from_pipeline(
            config, max_concurrent_loads=config.parallelism or self.driver_concurrency
        )
        aws = AwsPreflightSettings(
            stream_name=config.stream_name, checkpoint_table=config.checkpoint_table, pipeline_id=config.pipeline_id,
            label_keep_seconds=config.doris.label_keep_seconds,
            efo_consumer=self._efo_consumer_name(config.pipeline_id) if self.read_mode == "efo" else None,
            creates_checkpoint_table=self.create_checkpoint_table,
        )  # fmt: skip
        return doris, aws

    def _preflight_report(
        self, hook: DorisHook, doris: DorisPreflightSettings, aws: AwsPreflightSettings
    ) -> PreflightReport:
        doris_report = hook.preflight(doris)
        aws_report = aws_preflight(self.aws_hook.kinesis, self.aws_hook.dynamodb, aws)
        return PreflightReport((*doris_report.items, *aws_report.items), name="Doris and AWS")

    def _efo_consumer_name(self, pipeline_id: str) -> str:
        return self.efo_consumer_name or consumer_name(pipeline_id)


# --- helpers ---------------------------------------------------------------------------------------


def _passed_preflight_digest(store: DynamoCheckpointStore) -> str | None:
    """None also when the checkpoint table does not exist: the preflight then runs and names the
    table, its region and the fixes, instead of a bare ResourceNotFoundException on GetItem."""
    try:
        return store.passed_preflight_digest()
    except ClientError as exc:
        if aws_error_code(exc) != "ResourceNotFoundException":
            raise
        return None


def _interval(context: Context) -> tuple[datetime, datetime]:
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None or end <= start:
        raise AirflowException(_empty_interval_message(start, end, context.get("dag")))
    return start, end


def _empty_interval_message(start: Any, end: Any, dag: Any) -> str:
    """Why the run has no interval to load, and the timetables that give one on this Airflow."""
    timetable = type(getattr(dag, "timetable", None)).__name__ if getattr(dag, "timetable", None) is not None else None
    got = f"got [{start}, {end})" + (f" from the DAG's {timetable}" if timetable else "")
    if AIRFLOW_V_3_0_PLUS:
        why = (
            "On Airflow 3 a cron string gives a CronTriggerTimetable and schedule=timedelta(...) a "
            "DeltaTriggerTimetable: both make zero-length intervals, as do schedule=None, \"@once\" and "
            "\"@continuous\". Give the DAG a data-interval timetable: "
            "schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)) or "
            "schedule=CronDataIntervalTimetable(\"*/10 * * * *\", timezone=\"UTC\"), both from airflow.sdk"
        )
    else:
        why = (
            "On Airflow 2.11 a timedelta or cron string gives DeltaDataIntervalTimetable or "
            "CronDataIntervalTimetable (cron only while [scheduler] create_cron_data_intervals is True); "
            "CronTriggerTimetable and DeltaTriggerTimetable without interval=, schedule=None, \"@once\" and "
            "\"@continuous\" make zero-length intervals. Give the DAG a data-interval timetable: "
            "schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)) or "
            "schedule=CronDataIntervalTimetable(\"*/10 * * * *\", timezone=\"UTC\"), both from "
            "airflow.timetables.interval"
        )
    return (
        f"KinesisToDorisOperator needs a non-empty data interval [data_interval_start, data_interval_end), {got}. "
        f"{why}. See {readme_section('Schedules and dates')}."
    )


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


PREPARING_FAILED = (
    "Checking the deployment before planning failed (the checkpoint table, the Doris and AWS preflight, the "
    "Doris tables); nothing was planned or loaded"
)
PLANNING_FAILED = (
    "Planning the interval failed (listing the shards, fixing each shard's range in the checkpoint table); "
    "nothing was loaded"
)
COMMIT_FAILED = (
    "Committing the loaded ranges failed (marking them loaded and moving the checkpoints); the rows are in "
    "Doris, and a rerun of this task commits them without loading them twice"
)


def _explain_failure(exc: BaseException, failed: str = PLANNING_FAILED) -> str:
    """What failed and what to do, for the task log. Errors of this package keep their class
    across Spark (the job returns them typed, ``core.errors.RangeFailure``); any other error is
    described by the step that failed.

    :param failed: the step that failed, for errors of no known type.
    """
    text = str(exc)
    for error_type, advice in (
        (DataTrimmed, "Kinesis retention deleted records before they were loaded; see the shard and position "
                      "above. Load them from a backup or accept the loss explicitly by re-planning."),
        (UnresolvableLoad, "A chunk's outcome cannot be decided after Doris forgot its label; follow the message."),
        (LabelWindowBroken, "Nothing was loaded. Make label_keep_seconds match Doris's label window (or raise the "
                            "FE's settings), then clear the task."),
        (PermanentStreamLoadError, "Doris rejected the data; open the ErrorURL above for the rejected rows, fix "
                                   "the mapping or max_filter_ratio, then clear the task."),
        (CheckpointConflict, "Another run updated the same shard concurrently; the loaded data is deduplicated by "
                             "label, so rerun this task once the other run has finished."),
        (ConfigurationError, "A setting is invalid; fix the operator arguments or the connection."),
    ):
        if isinstance(exc, error_type):
            return f"{error_type.__name__}: {' '.join(text.split())[:2000]} — {advice}"
    line = _last_line_with(text, "Error")
    return f"{failed}: {line if type(exc).__name__ in line else f'{type(exc).__name__}: {line}'}"


def _explain_waiting(exc: ShardsWaiting, dag_id: str, interval: timedelta) -> str:
    """The message of ``exc`` and the commands that load the intervals the parents lack, on both
    majors: no run of them may exist (a pause, ``catchup=False``), so clearing one is not enough."""
    start_ms, end_ms = exc.lacking
    first = _utc(start_ms).isoformat() if start_ms is not None else "<the parents' first interval start>"
    last = (_utc(end_ms) - interval).isoformat()
    return (
        f"ShardsWaiting: {' '.join(str(exc).split())[:2000]} — Everything else of the interval is loaded. Load "
        f"the intervals the parents lack with a run of each: on Airflow 2.11 `airflow dags backfill -s {first} "
        f"-e {last} {dag_id}`, on Airflow 3 `airflow backfill create --dag-id {dag_id} --from-date {first} "
        f"--to-date {last}` (dates are interval starts, both inclusive); where a run of one exists and failed, "
        "clear it instead. This task's retries then load these shards (give it retries that outlast those runs, "
        "or clear it once they succeeded)."
    )


def _utc(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)


def _last_line_with(text: str, needle: str) -> str:
    lines = [line.strip() for line in text.splitlines() if needle in line]
    return (lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else "no message")[:2000]
