"""A pipeline's settings: what stays the same from interval to interval, checked when made.

:class:`PipelineConfig` and :class:`AwsSettings` carry no secret (they travel in the load job's
JSON, ``core.load_job``); :class:`Credentials` holds the secrets, which never leave the process
but through a 0600 file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_provider_kinesis_doris.core.concurrency import DEFAULT_DRIVER_CONCURRENCY
from airflow_provider_kinesis_doris.core.decoders import JSON, build_decoder, import_function
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.model import ChunkLimits

DORIS_PASSWORD_ENV = "KINESIS_DORIS_DORIS_PASSWORD"

DEFAULT_WAITING_WARN_AFTER_MS = 3_600_000
"""How long a shard may wait for its parents before the loader logs it as an error."""


DRIVER_CREDENTIALS = "driver"
"""``executor_credentials``: the AWS keys the driver resolved, shipped in the credentials file."""
DEFAULT_CHAIN = "default_chain"
"""``executor_credentials``: each executor's own boto3 default chain; nothing AWS is shipped."""
_ROLE_ARN = re.compile(r"arn:aws(-[a-z]+)*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]{1,512}")


def check_executor_credentials(name: str, value: str) -> str:
    """``value`` if it is one of ``executor_credentials``'s three forms; checked where the operator
    is built, as :class:`AwsSettings` trusts it.

    :raises ConfigurationError: ``value`` is not ``"driver"``, ``"default_chain"`` or an IAM role ARN.
    """
    if not isinstance(value, str) or (value not in (DRIVER_CREDENTIALS, DEFAULT_CHAIN) and not _ROLE_ARN.fullmatch(value)):
        raise ConfigurationError(
            f"{name} must be {DRIVER_CREDENTIALS!r} (the connection's credentials, resolved on the "
            f"driver and shipped in the credentials file), {DEFAULT_CHAIN!r} (each executor's own AWS default "
            "credential chain) or an IAM role ARN such as 'arn:aws:iam::123456789012:role/loader' (assumed by each "
            f"executor with its default chain); got {value!r}"
        )
    return value


@dataclass(frozen=True)
class AwsSettings:
    """Where the executors' boto3 clients go and how they get credentials. Never a secret: it
    travels in the job's JSON.

    :param region_name: AWS region.
    :param kinesis_endpoint_url: custom Kinesis endpoint (LocalStack, emulators), else AWS.
    :param dynamodb_endpoint_url: custom DynamoDB endpoint, else AWS.
    :param executor_credentials: ``"driver"`` (the keys in the job's credentials file; without
        keys there, the executor's default chain), ``"default_chain"`` (the executor's own chain:
        environment, instance profile, web identity ...; the file's keys are ignored) or an IAM
        role ARN, assumed by each executor process with its default chain and refreshed before
        the role session expires.
    :param verify: TLS certificate verification of the AWS clients: False, or a CA bundle path
        (which must exist on the executors), or None for botocore's default.
    :param botocore_config: arguments of ``botocore.config.Config`` for the AWS clients (retries,
        proxies, timeouts ...), JSON values only.
    :raises ConfigurationError: a ``botocore_config`` that ``Config`` refuses or JSON cannot carry
        (``executor_credentials`` is checked where the operator is built:
        :func:`check_executor_credentials`).
    """

    region_name: str | None = None
    kinesis_endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    executor_credentials: str = DRIVER_CREDENTIALS
    verify: bool | str | None = None
    botocore_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.botocore_config is not None:
            # Checked where the job is made, not on the executors after the planning; stored as
            # its JSON form so that the executors' copy equals this one (tuples become lists).
            object.__setattr__(self, "botocore_config", _json_botocore_config(self.botocore_config))

    @property
    def role_arn(self) -> str | None:
        """The IAM role the executors assume, if ``executor_credentials`` names one."""
        return None if self.executor_credentials in (DRIVER_CREDENTIALS, DEFAULT_CHAIN) else self.executor_credentials


def _json_botocore_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as JSON values, once ``Config`` accepts them and no proxy URL holds a password."""
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    normalized: dict[str, Any] = {}
    for name, value in options.items():
        try:
            normalized[name] = json.loads(json.dumps(value))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"botocore_config option {name!r} ({type(value).__name__}) is not a JSON value (the options "
                "travel in the load job)"
            ) from exc
    # Values are not quoted in the messages: a proxy URL may hold a password.
    if any("@" in str(url) for url in (normalized.get("proxies") or {}).values()):
        raise ConfigurationError(
            "botocore_config proxies must not hold credentials (user:password@): the options travel in the load "
            "job, which is no place for a secret; give the executors their proxy in their environment (HTTPS_PROXY) "
            "and override the connection's with botocore_config={'proxies': None}"
        )
    try:
        Config(**normalized)
    except (TypeError, BotoCoreError) as exc:
        raise ConfigurationError(f"botocore_config is not valid for botocore.config.Config: {exc}") from exc
    return normalized


@dataclass(frozen=True)
class Credentials:
    """Secrets an executor needs; read from a file or the environment, never serialized. The AWS
    keys are used only when ``AwsSettings.executor_credentials`` is ``"driver"``."""

    doris_password: str = field(default="", repr=False)
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)

    def write(self, path: str) -> None:
        """Write to ``path`` readable by the owner only (created 0600, never widened)."""
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(asdict(self), handle)

    @classmethod
    def load(cls, path: str | None) -> Credentials:
        """From the file at ``path`` if given, else from the environment."""
        if path:
            with open(path) as handle:
                return cls(**json.load(handle))
        return cls(doris_password=os.environ.get(DORIS_PASSWORD_ENV, ""))


@dataclass(frozen=True)
class PipelineConfig:
    """What stays the same from interval to interval: one stream into one table, and how the
    driver runs each interval. One object from the operator to the planner, the loaders and the
    commit; a setting keeps the name of the operator's field it comes from (``config``), in the
    job's JSON and in the range items too (``chunk_max_rows``, ``chunk_max_bytes``).

    ``doris`` carries no password (see :class:`Credentials`).

    :param transform_path: the user transform as ``package.module:function``, imported into
        ``mapping.transform`` when the config is made (in the task, and again on each executor).
    :raises ConfigurationError: the transform or the decoder cannot be imported.
    :param chunk_max_rows: records per chunk of a range planned with this config (its stored
        limits win over these once it has them: ``ShardRange.chunk_limits``).
    :param chunk_max_bytes: bytes per chunk, likewise.
    :param dead_letter_options: how rows go into ``dead_letter_table``.
    :param initial_position: where a shard's first range starts (see ``core.plan``).
    :param take_over_from: the pipeline this new one continues from (``core.handover``).
    :param relaxed_order: children do not wait for their parents.
    :param parallelism: Spark partitions at most (default: one per shard range).
    :param max_bad_record_ratio: the share of a chunk's rows Doris may refuse; they become dead
        letters. Above it (and from ``core.chunk_load.FEW_REFUSED_ROWS`` rows) the load fails: the
        table and the records probably do not match.
    :param efo_consumer_arn: a registered stream consumer: loaders read their ranges through it
        with enhanced fan-out (``SubscribeToShard``) instead of GetRecords
        (``core.kinesis.consumer.ensure_consumer`` gives it, on the driver).
    :param decoder: how a payload becomes rows (``core.decoders``): ``"json"``, ``"gzip+json"``,
        ``"csv"`` or ``package.module:function``; built into ``mapping.decoder`` when the config
        is made, like the transform.
    :param csv_columns: the field names of the ``"csv"`` decoder, in order.
    :param table_columns: the table's columns, to compare the records' JSON members with
        (``core.fields``); None where Doris does not match members to columns by name.
    :param unmatched_fields: ``"report"`` members no column takes, or ``"fail"`` before sending them.
    :param driver_concurrency: shards whose planning, empty check and commit run at the same time
        in the driver's process (``core.concurrency``).
    :param prune: after the commit, prune the checkpoint table's history older than the stream's
        retention plus Doris's label window, when no run has this hour (``core.prune``).
    :param waiting_warn_after_ms: a shard whose range has waited for its parents longer than this
        since it was first planned is logged as an error (a parent's run is probably stuck).

    The names, ``load_options`` and the numbers are the operator's checked arguments
    (``core.doris.identifiers``, ``core.decoders.check_load_options``, the groups of ``config``).
    """

    pipeline_id: str
    stream_name: str
    checkpoint_table: str
    doris_database: str
    doris_table: str
    dead_letter_table: str
    doris: DorisConnectionConfig
    aws: AwsSettings
    load_options: StreamLoadOptions
    mapping: RecordMapping
    chunk_max_rows: int = ChunkLimits.chunk_max_rows
    chunk_max_bytes: int = ChunkLimits.chunk_max_bytes
    transform_path: str | None = None
    dead_letter_options: StreamLoadOptions = field(default_factory=StreamLoadOptions.json_lines)
    initial_position: str = "INTERVAL"
    take_over_from: str | None = None
    relaxed_order: bool = False
    parallelism: int | None = None
    retry_policy: RetryPolicy = RetryPolicy()
    max_bad_record_ratio: float = 0.5
    efo_consumer_arn: str | None = None
    decoder: str = JSON
    csv_columns: tuple[str, ...] | None = None
    table_columns: tuple[str, ...] | None = None
    unmatched_fields: str = "report"
    driver_concurrency: int = DEFAULT_DRIVER_CONCURRENCY
    prune: bool = True
    waiting_warn_after_ms: int = DEFAULT_WAITING_WARN_AFTER_MS

    @property
    def chunk_limits(self) -> ChunkLimits:
        """``chunk_max_rows`` and ``chunk_max_bytes``, as a range stores and settles them."""
        return ChunkLimits(self.chunk_max_rows, self.chunk_max_bytes)

    def __post_init__(self) -> None:
        # The names, the options and the ratio come checked from the operator's arguments
        # (operators.loader_setup.table_names, config.LoadConfig, config.check_groups_together).
        if self.decoder != JSON or self.mapping.decoder is None:
            # Built on every construction, in the task and on each executor (a replace() with other
            # columns rebuilds it); a mapping given a decoder function of its own keeps it.
            decoder = build_decoder(self.decoder, self.csv_columns)
            object.__setattr__(self, "mapping", replace(self.mapping, decoder=decoder))
        if self.transform_path and self.mapping.transform is None:
            # Imported here, where the config is made (before planning, in the task and on every
            # executor), so each runner maps with the same function and a bad path loads nothing.
            object.__setattr__(self, "mapping", replace(self.mapping, transform=import_transform(self.transform_path)))


def import_transform(path: str) -> Any:
    """The user transform named ``package.module:function``."""
    return import_function(path, "transform")
