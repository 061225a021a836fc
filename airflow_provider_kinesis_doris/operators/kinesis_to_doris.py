"""``KinesisToDorisOperator``: load one data interval of a Kinesis stream into a Doris table,
exactly once.

Seal → plan → read + load → commit. See the README for the walk-through and the guarantees, and
``docs/checkpoints.md`` for the checkpoint table.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from copy import deepcopy
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, conf

from airflow_provider_kinesis_doris.assets.doris import create_asset
from airflow_provider_kinesis_doris.config import (
    DRIVER_CREDENTIALS,
    GROUPS,
    LoadConfig,
    MappingConfig,
    ReadConfig,
    RunnerConfig,
    SparkRunner,
    StateConfig,
)
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, ShardsWaiting
from airflow_provider_kinesis_doris.core.pipeline import PipelineConfig, run_interval
from airflow_provider_kinesis_doris.core.report import xcom_summary
from airflow_provider_kinesis_doris.hooks.doris import DorisHook
from airflow_provider_kinesis_doris.lineage import operator_lineage, stream_arn_of
from airflow_provider_kinesis_doris.links.doris import DorisTableLink
from airflow_provider_kinesis_doris.links.pipeline_page import KinesisDorisPipelineLink
from airflow_provider_kinesis_doris.operators import loader_setup as setup
from airflow_provider_kinesis_doris.operators.dag_runs import catch_up_for, epoch_ms, interval_of
from airflow_provider_kinesis_doris.operators.loader_arguments import LOADER_ARGUMENT_CHECKS, check_groups
from airflow_provider_kinesis_doris.operators.loader_messages import (
    PREPARING_FAILED,
    explain_failure,
    explain_waiting,
    report_totals,
    run_failure,
)
from airflow_provider_kinesis_doris.operators.loader_preflight import deployment_report, run_preflight
from airflow_provider_kinesis_doris.operators.pipeline_arguments import (
    PIPELINE_TEMPLATE_FIELDS,
    TABLE_REQUIRED_CHECKS,
    KinesisPipelineBaseOperator,
    rendered_later,
)
from airflow_provider_kinesis_doris.version_compat import AirflowRescheduleException, DateTimeTrigger

if TYPE_CHECKING:
    import jinja2
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_kinesis_doris.core.doris.preflight import PreflightReport
    from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
    from airflow_provider_kinesis_doris.operators.spark_connections import LoadJobSubmitter

WAIT_IN_TASK_AT_MOST = timedelta(minutes=5)
"""A wait for the seal up to this long is slept in the task; a longer one (a run created well
before its interval ends) reschedules the task, or defers it when ``deferrable``."""


class KinesisToDorisOperator(KinesisPipelineBaseOperator):
    """Load the records that arrived in ``[data_interval_start, data_interval_end)`` on a Kinesis
    stream into a Doris table, exactly once across retries, reruns, backfills and reshards.

    The interval is loaded once it is sealed (``data_interval_end + read.seal_grace`` has passed);
    until then the task waits in place, or, when that is more than :data:`WAIT_IN_TASK_AT_MOST`
    away, defers (``deferrable=True``) or reschedules itself. Each run plans per
    shard a range of records and persists it in DynamoDB, reads and Stream Loads the ranges, and
    moves the checkpoints only after Doris reports the data visible.

    The settings come in groups, each an object of ``airflow_provider_kinesis_doris.config``
    that checks itself when built and again once its templated fields are rendered:

    - ``runner``: :class:`SparkRunner` (default), :class:`InProcessRunner` or
      :class:`SparkOrInProcess` (decides per run by the estimated records).
    - ``mapping``: :class:`MappingConfig`: decoder, transform, required fields, metadata
      columns, sequence column, dead-letter table.
    - ``read``: :class:`ReadConfig`: polling or enhanced fan-out, initial position, seal grace,
      shard order.
    - ``load``: :class:`LoadConfig`: Stream Load options and headers, chunk limits, bad-record
      ratio.
    - ``state``: :class:`StateConfig`: the checkpoint table's creation and pruning, driver
      concurrency, intervals no DAG run covered.

    .. seealso::
        Doris Stream Load: https://doris.apache.org/docs/data-operate/import/import-way/stream-load-manual

    :param stream_name: the Kinesis stream. (templated)
    :param doris_table: the target, ``database.table``. (templated)
    :param checkpoint_table: the DynamoDB table holding ranges, boundaries, chunk intents and
        checkpoints; shared by pipelines. (templated)
    :param pipeline_id: identity of this stream→table load in the checkpoint table and in the
        labels; default ``<stream_name>.<doris_table>``. Changing it starts a new pipeline. (templated)
    :param aws_conn_id: AWS connection (credentials, region, ``endpoint_url`` extras). (templated)
    :param region_name: AWS region; the connection's by default. (templated)
    :param verify: whether to verify TLS certificates, or a CA bundle path (which must exist on
        Spark executors too); the connection's by default. (templated)
    :param botocore_config: ``botocore.config.Config`` arguments (retries, proxies, timeouts),
        instead of the connection's ``config_kwargs``; the task's and the loaders' clients use them.
        (templated)
    :param executor_credentials: how the loaders (Spark executors, or the task's process) get AWS
        credentials: ``"driver"`` (default): the connection's, resolved once when the task starts
        and shipped in the 0600 credentials file; ``"default_chain"``: their own (instance
        profile, IRSA, environment); or an IAM role ARN they assume with their own credentials.
        See ``docs/production.md``.
    :param doris_conn_id: ``doris`` connection. (templated)
    :param runner: how the ranges are loaded. (its templated fields are rendered)
    :param mapping: how a record becomes a row. (its templated fields are rendered)
    :param read: how and when the stream is read. (its templated fields are rendered)
    :param load: how rows go to Doris. (its templated fields are rendered)
    :param state: how the checkpoint table is kept.
    :param deferrable: wait for the seal in the triggerer instead of rescheduling.
    """

    template_fields: Sequence[str] = aws_template_fields(
        *PIPELINE_TEMPLATE_FIELDS, "doris_conn_id", "runner", "mapping", "read", "load"
    )
    pipeline_argument_checks = TABLE_REQUIRED_CHECKS
    operator_extra_links = (DorisTableLink(), KinesisDorisPipelineLink())
    ui_color = "#d4e9f7"

    def __init__(
        self,
        *,
        doris_table: str,
        executor_credentials: str = DRIVER_CREDENTIALS,
        doris_conn_id: str = DorisHook.default_conn_name,
        runner: RunnerConfig | None = None,
        mapping: MappingConfig | None = None,
        read: ReadConfig | None = None,
        load: LoadConfig | None = None,
        state: StateConfig | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        runner, mapping, read = runner or SparkRunner(), mapping or MappingConfig(), read or ReadConfig()
        load, state = load or LoadConfig(), state or StateConfig()
        # A bad literal fails the DAG's parse.
        check_groups({"runner": runner, "mapping": mapping, "read": read, "load": load, "state": state}, rendered=False)
        super().__init__(doris_table=doris_table, **kwargs)
        self.executor_credentials = executor_credentials
        self.doris_conn_id = doris_conn_id
        self.runner, self.mapping, self.read, self.load, self.state = runner, mapping, read, load, state
        self.deferrable = deferrable
        self.check_arguments(LOADER_ARGUMENT_CHECKS)
        self._checked_names: tuple[tuple[str, str | None], tuple[str, str, str]] | None = None
        if not any(rendered_later(value) for value in (doris_table, mapping.dead_letter_table)):
            # Literal names fail the DAG's parse; templated ones when the task runs.
            database, table, _ = self._table_names()
            if "outlets" not in kwargs and not rendered_later(doris_conn_id):
                self.outlets = [create_asset(database=database, table=table, conn_id=doris_conn_id)]
        self._submitter: LoadJobSubmitter | None = None
        self._run_totals: dict[str, Any] | None = None
        self._preflight_warnings: list[str] = []
        """What the preflight this run made found not ok (nothing when the settings passed before)."""

    def render_template_fields(self, context: Context, jinja_env: jinja2.Environment | None = None) -> None:
        # Rendering sets the groups' fields in place: copies keep the DAG's own objects templates.
        for name in GROUPS:
            setattr(self, name, deepcopy(getattr(self, name)))
        super().render_template_fields(context, jinja_env)
        check_groups({name: getattr(self, name) for name in GROUPS}, rendered=True)

    # -- seal -------------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        start, end = interval_of(context)
        sealed_at = end + self.read.seal_grace
        wait = sealed_at - datetime.now(timezone.utc)
        if wait > timedelta(0):
            self.log.info("Interval [%s, %s) is sealed at %s; waiting", start.isoformat(), end.isoformat(), sealed_at)
            if wait <= WAIT_IN_TASK_AT_MOST:
                # A scheduled run starts at its interval's end and waits seal_grace. A rescheduled or
                # deferred task comes back under the same try number; an exit event of its earlier
                # execution that the scheduler handles late then reads as the running try's death,
                # and the try is failed and retried (docs/design.md "Waiting for the seal").
                time.sleep(wait.total_seconds())
            elif self.deferrable:
                self.defer(trigger=DateTimeTrigger(moment=sealed_at), method_name="execute_sealed")
            else:
                raise AirflowRescheduleException(sealed_at)
        return self._load(context, start, end)

    def execute_sealed(self, context: Context, event: Any = None) -> dict[str, Any]:
        """Resumed by the trigger once the interval is sealed."""
        start, end = interval_of(context)
        return self._load(context, start, end)

    # -- plan → load → commit ---------------------------------------------------------------------

    def _load(self, context: Context, start: datetime, end: datetime) -> dict[str, Any]:
        doris_hook = DorisHook(doris_conn_id=self.doris_conn_id)
        try:
            # Before any statement runs: the names are templated (a DAG run's conf can set them)
            # and reach SQL and Stream Load URLs.
            database, table, _ = self._table_names()
            self.aws_hook.check_connection_exists()
            DorisTableLink.persist(context, doris_hook.connection_config().fe_url, database, table)
            config = self._pipeline_config(doris_hook)
            settings, self._submitter = setup.spark_settings(self.runner)
        except ConfigurationError as exc:
            raise AirflowException(f"The operator's settings are invalid; nothing was planned or loaded: {exc}") from exc
        try:
            store = self.aws_hook.checkpoint_store(self.checkpoint_table, config.pipeline_id)
            config = self._prepare(doris_hook, store, config)
        except AirflowException:
            raise
        except Exception as exc:
            # An AWS or Doris error of its own (a wrong endpoint, credentials) still names the step.
            raise AirflowException(explain_failure(exc, PREPARING_FAILED)) from exc
        runner, auto = setup.build_runner(self.runner, store, settings, self.state.driver_concurrency)
        try:
            result = run_interval(
                config, epoch_ms(start), epoch_ms(end), kinesis=self.aws_hook.kinesis, store=store,
                credentials=self.aws_hook.load_job_credentials(doris_hook.connection_config().password,
                                                               self.executor_credentials),
                runner=runner, catch_up=catch_up_for(context, load=self.state.load_skipped_intervals,
                                      max_intervals=self.state.max_skipped_intervals),
                find_cuts=setup.cut_finder(self.runner),
            )  # fmt: skip
        except ShardsWaiting as exc:
            # The failed try still tells, in XCom, which shards wait for which parents, and its
            # metrics and lineage count what it loaded of the rest.
            context["ti"].xcom_push(key="waiting", value={shard: list(parents) for shard, parents in exc.waiting.items()})
            self._report(config.pipeline_id, exc.result.summary())  # its metrics count the waiting shards
            raise AirflowException(explain_waiting(exc, context["dag"].dag_id, end - start)) from exc
        except Exception as exc:
            raise run_failure(exc, config.pipeline_id, setup.loading_step(self.runner, auto)) from exc
        if result.commit is None:
            self.log.info("Nothing to load for this interval: no readable shard range; Spark was not started")
        self._report(config.pipeline_id, result.summary())
        summary = xcom_summary(result)
        if self._preflight_warnings:
            summary["preflight"] = self._preflight_warnings
        if auto is not None and auto.choice is not None:
            summary["runner"] = auto.choice.summary()
        return summary

    def _report(self, pipeline_id: str, totals: dict[str, Any]) -> None:
        """Log and send the run's totals, and keep them for lineage."""
        report_totals(self.log, pipeline_id, totals)
        self._run_totals = totals

    def _pipeline_config(self, doris_hook: DorisHook) -> PipelineConfig:
        """The pipeline's settings, with the transform and the decoder imported (before anything
        is planned)."""
        return setup.pipeline_config(
            pipeline_id=self.resolved_pipeline_id, stream_name=self.stream_name, checkpoint_table=self.checkpoint_table,
            table_names=self._table_names(), doris_hook=doris_hook, aws_hook=self.aws_hook,
            executor_credentials=self.executor_credentials, runner=self.runner, mapping=self.mapping, read=self.read,
            load=self.load, state=self.state,
        )  # fmt: skip

    def _prepare(self, doris_hook: DorisHook, store: CheckpointStore, config: PipelineConfig) -> PipelineConfig:
        """Before planning: the checkpoint table, the preflight, the Doris tables, the stream
        consumer; ``config`` with the consumer's ARN when the pipeline reads with enhanced fan-out."""
        if self.state.create_checkpoint_table:
            store.items.create_table_if_missing()
        self._preflight_warnings = run_preflight(doris_hook, self.aws_hook, store, config, self.read, self.state, self.log)
        try:
            doris_hook.ensure_dead_letter_table(
                config.doris_database, config.doris_table, config.dead_letter_table,
                self.mapping.dead_letter_table_properties,
            )  # fmt: skip
        except ConfigurationError as exc:
            raise AirflowException(str(exc)) from exc
        return setup.with_stream_consumer(config, self.read, self.aws_hook)

    # -- preflight --------------------------------------------------------------------------------

    def check_deployment(self) -> PreflightReport:
        """Both halves of the preflight for this task's settings, as its next run would make them
        and whether or not they passed before (``python -m airflow_provider_kinesis_doris check``).
        Nothing is created, planned or loaded; the CLI renders templated arguments first, as a
        run at its ``--logical-date`` would."""
        doris_hook = DorisHook(doris_conn_id=self.doris_conn_id)
        try:
            config = self._pipeline_config(doris_hook)
        except ConfigurationError as exc:
            raise AirflowException(f"The operator's settings are invalid: {exc}") from exc
        return deployment_report(doris_hook, self.aws_hook, config, self.read, self.state)

    # -- lineage ----------------------------------------------------------------------------------

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The stream and the table this run loads, without counts (``lineage`` names them)."""
        return operator_lineage(self._stream_arn, self.doris_conn_id, self._table_names(), None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The stream, the table and, when the run sent rows to it, the dead-letter table, with
        what the run read and loaded and the tables' columns."""
        return operator_lineage(self._stream_arn, self.doris_conn_id, self._table_names(), self._run_totals,
                                with_schema=True)  # fmt: skip

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """As on completion, with what a run that failed with ``ShardsWaiting`` loaded of the
        rest (no counts otherwise), and without asking Doris for the columns."""
        return operator_lineage(self._stream_arn, self.doris_conn_id, self._table_names(), self._run_totals)

    @cached_property
    def _stream_arn(self) -> str:
        # Asked once per task: on start, reused on completion or failure.
        return stream_arn_of(self.aws_hook.kinesis, self.stream_name)

    # -- helpers ----------------------------------------------------------------------------------

    def _table_names(self) -> tuple[str, str, str]:
        """The database, table and dead-letter table, checked once for the values they come from:
        literal ones when the DAG is parsed, templated ones once rendered (which changes them)."""
        given = (self.doris_table, self.mapping.dead_letter_table)
        if self._checked_names is None or self._checked_names[0] != given:
            self._checked_names = (given, setup.table_names(*given))
        return self._checked_names[1]

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` (and its application on YARN or Kubernetes)."""
        if self._submitter is not None:
            self._submitter.on_kill()

