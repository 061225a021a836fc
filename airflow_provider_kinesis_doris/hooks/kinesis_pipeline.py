"""Airflow hook for the AWS side of a pipeline: its Kinesis stream and its DynamoDB checkpoint
table, both through one Airflow AWS connection.

The hook is the amazon provider's ``KinesisHook`` (``conn`` is the Kinesis client) with a
DynamoDB ``AwsBaseHook`` of the same settings beside it, so the connection's credentials, region,
role and ``service_config`` (e.g. a DynamoDB ``endpoint_url``) apply as everywhere else in Airflow.
Operators, the sensor and the trigger use this hook; it imports none of them.
"""

from __future__ import annotations

from copy import deepcopy
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowNotFoundException
from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.kinesis import KinesisHook
from botocore.exceptions import BotoCoreError, ClientError

from airflow_provider_kinesis_doris.core.aws_clients import lean_client_config
from airflow_provider_kinesis_doris.core.aws_preflight import AwsPreflightSettings, aws_preflight
from airflow_provider_kinesis_doris.core.doris.preflight import PreflightReport, deep_connection_test
from airflow_provider_kinesis_doris.core.errors import ConfigurationError, aws_error_code
from airflow_provider_kinesis_doris.core.kinesis.consumer import ensure_consumer
from airflow_provider_kinesis_doris.core.settings import DRIVER_CREDENTIALS, AwsSettings, Credentials
from airflow_provider_kinesis_doris.core.rebalance import observe_topology
from airflow_provider_kinesis_doris.core.stores.checkpoint_store import CheckpointStore
from airflow_provider_kinesis_doris.core.stores.dynamodb import DynamoItems, dynamo_store

if TYPE_CHECKING:
    from botocore.config import Config

    from airflow_provider_kinesis_doris.core.kinesis.topology import TopologyChange


class LeanClientsMixin:
    """Builds the hook's clients with ``core.aws_clients.LEAN_CLIENT_OPTIONS`` under the
    connection's or the hook's ``config``: the driver makes several calls per shard every
    interval, and botocore's own work per call is most of its CPU."""

    def get_client_type(self, region_name: str | None = None, config: Config | None = None, deferrable: bool = False) -> Any:
        # A copy of the hook's config: building a client rewrites its ``retries`` dict in place.
        lean = lean_client_config(deepcopy(self.config) if config is None else config)  # type: ignore[attr-defined]
        return super().get_client_type(region_name=region_name, config=lean, deferrable=deferrable)  # type: ignore[misc]


class DynamoDBClientHook(LeanClientsMixin, AwsBaseHook):
    """The checkpoint table's DynamoDB client hook (``client_type="dynamodb"``)."""


class KinesisPipelineHook(LeanClientsMixin, KinesisHook):
    """Kinesis and the DynamoDB checkpoint table of a Kinesis → Doris pipeline.

    The hook knows only the connection and client settings; the stream, the table and the
    pipeline id are arguments of its methods.

    .. seealso:: :class:`~airflow.providers.amazon.aws.hooks.kinesis.KinesisHook`

    :param aws_conn_id: the Airflow AWS connection (credentials, region, ``endpoint_url``, and
        ``service_config.dynamodb.endpoint_url`` for the checkpoint table).
    :param region_name: AWS region; the connection's by default.
    :param verify: whether to verify TLS certificates, or a CA bundle path; as on every AWS hook.
    :param config: botocore client configuration (a ``botocore.config.Config`` or its arguments).
    """

    def __init__(
        self,
        aws_conn_id: str | None = KinesisHook.default_conn_name,
        region_name: str | None = None,
        verify: bool | str | None = None,
        config: Config | dict[str, Any] | None = None,
    ) -> None:
        super().__init__(aws_conn_id=aws_conn_id, region_name=region_name, verify=verify, config=config)
        self._client_settings = {"region_name": region_name, "verify": verify, "config": config}

    def check_connection_exists(self) -> None:
        """Fail on a connection id Airflow does not have, before boto3 falls back to its default
        credentials and region (as every AWS hook does, with a warning only). ``aws_default`` may
        be missing: then boto3's defaults are meant (an instance or pod role).

        :raises ConfigurationError: ``aws_conn_id`` names no connection.
        """
        if not self.aws_conn_id or self.aws_conn_id == self.default_conn_name:
            return
        try:
            self.get_connection(self.aws_conn_id)
        except AirflowNotFoundException:
            raise ConfigurationError(
                f"The AWS connection {self.aws_conn_id!r} does not exist in Airflow: add it (conn type aws) or set "
                "aws_conn_id to one that exists; aws_conn_id=None uses boto3's default credentials and region"
            ) from None

    @cached_property
    def dynamodb_hook(self) -> DynamoDBClientHook:
        """A DynamoDB client hook on the same connection and settings. Not ``DynamoDBHook``: its
        ``client`` belongs to a boto3 resource, which re-serializes the typed attribute values
        (``{"S": ...}``) the checkpoint store sends."""
        return DynamoDBClientHook(aws_conn_id=self.aws_conn_id, client_type="dynamodb", **self._client_settings)

    @property
    def kinesis(self) -> Any:
        """The boto3 Kinesis client (``conn``)."""
        return self.conn

    @property
    def dynamodb(self) -> Any:
        """The boto3 DynamoDB client (of the checkpoint table's endpoint)."""
        return self.dynamodb_hook.conn

    def aws_settings(self, executor_credentials: str = DRIVER_CREDENTIALS) -> AwsSettings:
        """Region, endpoints, TLS verification and botocore options the load job's executors use,
        and how they get AWS credentials (no credentials themselves). The botocore options are
        this hook's ``config``, else the connection's ``config_kwargs``, as for every AWS hook.

        :param executor_credentials: ``"driver"``, ``"default_chain"`` or an IAM role ARN (see
            :class:`~airflow_provider_kinesis_doris.core.settings.AwsSettings`).
        :raises ConfigurationError: a bad ``executor_credentials``, or botocore options that are
            not JSON (e.g. ``signature_version`` ``UNSIGNED``).
        """
        # Only the options the user set: Config.merge reads the same attribute. The Config's other
        # attributes hold botocore's defaults, which the executors' botocore has anyway.
        options = self.config._user_provided_options
        return AwsSettings(
            region_name=self.kinesis.meta.region_name,
            kinesis_endpoint_url=self.kinesis.meta.endpoint_url,
            dynamodb_endpoint_url=self.dynamodb.meta.endpoint_url,
            executor_credentials=executor_credentials,
            verify=self.verify,
            botocore_config=dict(options) or None,
        )

    def load_job_credentials(self, doris_password: str, executor_credentials: str = DRIVER_CREDENTIALS) -> Credentials:
        """The secrets the load job's credentials file carries: the Doris password, and the
        connection's AWS keys (resolved now, e.g. by assuming its role) only when the executors
        use the driver's credentials. In the other modes no AWS secret is resolved or shipped.

        :param doris_password: the Doris connection's password.
        :param executor_credentials: as for :meth:`aws_settings` (checked where the operator is
            built: ``core.settings.check_executor_credentials``).
        """
        if executor_credentials != DRIVER_CREDENTIALS:
            return Credentials(doris_password=doris_password)
        aws = self.get_credentials()
        return Credentials(
            doris_password=doris_password,
            aws_access_key_id=aws.access_key,
            aws_secret_access_key=aws.secret_key,
            aws_session_token=aws.token,
        )

    def register_consumer(self, stream_name: str, name: str) -> str:
        """The ARN of the stream's enhanced fan-out consumer ``name``, ACTIVE: registered if
        missing, kept across runs (``core.kinesis.consumer.ensure_consumer``).

        :raises ConfigurationError: the name is not one Kinesis accepts.
        :raises TimeoutError: the consumer did not become ACTIVE in time.
        """
        arn = ensure_consumer(self.kinesis, stream_name, name)
        self.log.info("Reading through stream consumer %s (enhanced fan-out)", arn)
        return arn

    def checkpoint_store(self, table: str, pipeline_id: str) -> CheckpointStore[DynamoItems]:
        """The checkpoint store of ``pipeline_id`` on the DynamoDB table ``table``."""
        return dynamo_store(self.dynamodb, table, pipeline_id)

    def check_topology(self, stream_name: str, checkpoint_table: str, pipeline_id: str) -> TopologyChange | None:
        """One look at the stream (blocking): the change since the pipeline's stored topology, or
        None on the first look (which stores the topology).

        :raises ConfigurationError: the stream or the checkpoint table does not exist.
        """
        store = self.checkpoint_store(checkpoint_table, pipeline_id)
        try:
            return observe_topology(self.kinesis, store.ledger, stream_name)
        except ClientError as error:
            if aws_error_code(error) != "ResourceNotFoundException":
                raise
            if error.operation_name == "ListShards":
                missing = f"Kinesis stream {stream_name!r} does not exist"
            else:
                missing = (
                    f"DynamoDB checkpoint table {checkpoint_table!r} does not exist: the loader creates it on its "
                    "first run (StateConfig(create_checkpoint_table=True)); run the loader once before the watch, or create it"
                )
            raise ConfigurationError(f"{missing} (AWS connection {self.aws_conn_id!r})") from error

    def preflight(self, settings: AwsPreflightSettings) -> PreflightReport:
        """Check what the pipeline of ``settings`` needs of its stream and checkpoint table
        (``core.aws_preflight``: key schema, billing, recovery, retention, encryption, consumers,
        the IAM actions that can be tried without side effects), with read-only calls.

        :raises botocore.exceptions.BotoCoreError: an endpoint could not be reached.
        """
        return aws_preflight(self.kinesis, self.dynamodb, settings)

    def test_connection(self, preflight: AwsPreflightSettings | None = None) -> tuple[bool, str]:
        """One cheap call to each endpoint (ListStreams, ListTables) proves the credentials, region
        and endpoints; says which one failed. Not the amazon provider's STS call: an endpoint
        override (a VPC endpoint, an emulator) need not serve STS, and it is Kinesis and DynamoDB
        the pipeline uses.

        :param preflight: deep mode: then also :meth:`preflight` with these settings, failing on a
            fatal item; the message lists every item that is not ok.
        """
        deep = None if preflight is None else partial(self.preflight, preflight)
        return deep_connection_test(self._test_both_endpoints(), deep, (BotoCoreError, ClientError))

    def _test_both_endpoints(self) -> tuple[bool, str]:
        for service, client, call in (("Kinesis", self.kinesis, "list_streams"), ("DynamoDB", self.dynamodb, "list_tables")):
            try:
                getattr(client, call)(Limit=1)
            except (BotoCoreError, ClientError) as exc:
                return False, f"{service} at {client.meta.endpoint_url} failed: {type(exc).__name__}: {exc}"
        return True, (
            f"Connected to Kinesis {self.kinesis.meta.endpoint_url} and DynamoDB {self.dynamodb.meta.endpoint_url} "
            f"in {self.kinesis.meta.region_name} (AWS connection {self.aws_conn_id!r})"
        )
