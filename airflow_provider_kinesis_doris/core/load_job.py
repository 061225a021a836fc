"""The load job: a pipeline's settings and the ranges planned for one interval, as plain JSON.

The job carries no secret. Executors take the Doris password (and, when
``AwsSettings.executor_credentials`` is ``"driver"``, AWS keys) from a 0600 credentials file whose
*path* is in the job (``credentials_file``), or from their environment
(``KINESIS_DORIS_DORIS_PASSWORD`` and boto3's usual chain), so nothing secret reaches a Spark
plan, a command line or a log.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_kinesis_doris.core.decoders import JSON, build_decoder, check_load_options, import_function
from airflow_provider_kinesis_doris.core.doris.identifiers import check_name
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ChunkLimits, Position, RangeState, ShardRange
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.partitions import group_ranges
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.value_checks import check_ratio

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.plan import Plan

DORIS_PASSWORD_ENV = "KINESIS_DORIS_DORIS_PASSWORD"


DRIVER_CREDENTIALS = "driver"
"""``executor_credentials``: the AWS keys the driver resolved, shipped in the credentials file."""
DEFAULT_CHAIN = "default_chain"
"""``executor_credentials``: each executor's own boto3 default chain; nothing AWS is shipped."""
_ROLE_ARN = re.compile(r"arn:aws(-[a-z]+)*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]{1,512}")


def check_executor_credentials(value: str) -> None:
    """Refuse an ``executor_credentials`` that is none of its three forms.

    :raises ConfigurationError: ``value`` is not ``"driver"``, ``"default_chain"`` or an IAM role ARN.
    """
    if value not in (DRIVER_CREDENTIALS, DEFAULT_CHAIN) and not _ROLE_ARN.fullmatch(value):
        raise ConfigurationError(
            f"executor_credentials must be {DRIVER_CREDENTIALS!r} (the connection's credentials, resolved on the "
            f"driver and shipped in the credentials file), {DEFAULT_CHAIN!r} (each executor's own AWS default "
            "credential chain) or an IAM role ARN such as 'arn:aws:iam::123456789012:role/loader' (assumed by each "
            f"executor with its default chain); got {value!r}"
        )


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
    :raises ConfigurationError: a bad ``executor_credentials``, or a ``botocore_config`` that
        ``Config`` refuses or JSON cannot carry.
    """

    region_name: str | None = None
    kinesis_endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    executor_credentials: str = DRIVER_CREDENTIALS
    verify: bool | str | None = None
    botocore_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        check_executor_credentials(self.executor_credentials)
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
    """What stays the same from interval to interval: one stream into one table.

    ``doris`` carries no password (see :class:`Credentials`).

    :param transform_path: the user transform as ``package.module:function``, imported into
        ``mapping.transform`` when the config is made (in the task, and again on each executor).
    :raises ConfigurationError: the transform cannot be imported, or 2PC load options.
    :param dead_letter_options: how rows go into ``dead_letter_table``.
    :param initial_position: where a shard's first range starts (see ``core.plan``).
    :param relaxed_order: children do not wait for their parents.
    :param parallelism: Spark partitions at most (default: one per shard range).
    :param max_bad_record_ratio: the share of a chunk's rows Doris may refuse; they become dead
        letters. Above it (and from ``core.load.FEW_REFUSED_ROWS`` rows) the load fails: the
        table and the records probably do not match.
    :param efo_consumer_arn: a registered stream consumer: loaders read their ranges through it
        with enhanced fan-out (``SubscribeToShard``) instead of GetRecords
        (``core.kinesis.consumer.ensure_consumer`` gives it, on the driver).
    :param decoder: how a payload becomes rows (``core.decoders``): ``"json"``, ``"gzip+json"``,
        ``"csv"`` or ``package.module:function``; built into ``mapping.decoder`` when the config
        is made, like the transform.
    :param csv_columns: the field names of the ``"csv"`` decoder, in order.
    :raises ConfigurationError: also for a database or table name Doris could not have
        (``core.doris.identifiers``), and for ``load_options`` that contradict the JSON-lines body.
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
    chunk_limits: ChunkLimits = ChunkLimits()
    transform_path: str | None = None
    dead_letter_options: StreamLoadOptions = field(default_factory=StreamLoadOptions.json_lines)
    initial_position: str = "INTERVAL"
    relaxed_order: bool = False
    parallelism: int | None = None
    retry_policy: RetryPolicy = RetryPolicy()
    max_bad_record_ratio: float = 0.5
    efo_consumer_arn: str | None = None
    decoder: str = JSON
    csv_columns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("doris_database", "doris_table", "dead_letter_table"):
            check_name(getattr(self, name), name)
        if self.decoder != JSON or self.mapping.decoder is None:
            # Built on every construction, in the task and on each executor (a replace() with other
            # columns rebuilds it); a mapping given a decoder function of its own keeps it.
            decoder = build_decoder(self.decoder, self.csv_columns)
            object.__setattr__(self, "mapping", replace(self.mapping, decoder=decoder))
        for name in ("load_options", "dead_letter_options"):
            options = getattr(self, name)
            check_load_options(
                {"format": options.format, "strip_outer_array": options.strip_outer_array,
                 "read_json_by_line": options.read_json_by_line},
                self.decoder if name == "load_options" else JSON,
            )  # fmt: skip
        if self.transform_path and self.mapping.transform is None:
            # Imported here, where the config is made (before planning, in the task and on every
            # executor), so each runner maps with the same function and a bad path loads nothing.
            object.__setattr__(self, "mapping", replace(self.mapping, transform=import_transform(self.transform_path)))
        check_ratio("max_bad_record_ratio", self.max_bad_record_ratio)
        for name in ("load_options", "dead_letter_options"):
            if getattr(self, name).two_phase_commit:
                # A pre-committed load is not visible: checkpoints would move past data that Doris
                # aborts after its precommit timeout (I4).
                raise ConfigurationError(
                    f"{name}: two_phase_commit is not supported by the pipeline, which records a chunk as loaded "
                    "only once Doris makes it VISIBLE; remove it (each chunk is already loaded exactly once "
                    "under its label)"
                )

    def job(
        self,
        plan: Plan,
        weights: Mapping[str, float] | Callable[[], Mapping[str, float]] | None = None,
        assignment: Mapping[str, int] | None = None,
    ) -> LoadJob:
        """The load job of ``plan``'s ranges, grouped into Spark partitions.

        :param weights: per shard id, what the rebalance step measured (1 if absent); or a function
            that reads them, called only when ranges share partitions (it costs a read per shard).
        :param assignment: the rebalance step's stored shard → partition assignment. When there is
            one, its partition count and placement win over ``parallelism``, which otherwise caps
            the partitions (default: one per range).
        """
        ranges = plan.ranges
        parents = {shard.shard_id: shard.parent_ids for shard in plan.shards}
        partitions = max(assignment.values()) + 1 if assignment else self.parallelism or max(len(ranges), 1)
        if callable(weights):
            # With a partition of its own for every range there is nothing to balance.
            weights = weights() if assignment or partitions < len(ranges) else None
        new = set(plan.new_ranges)
        # A job can run more than once: Spark retries a task whose executor was lost (any error but
        # a KinesisDorisError) and may start a speculative copy. Without the chunk log a re-run cuts
        # the chunks the first run cut only if the range's first record stays put: a stored AT/AFTER
        # cut does (if retention trims it, the reader raises DataTrimmed), a PENDING one is made
        # concrete once by a conditional write. A SHARD_START range reads from TRIM_HORIZON, whose
        # first record retention moves; re-cut from a later one, its chunks would go out under new
        # labels (a duplicate). So such a range always reads its log: a Query once in a shard's life
        # (only its first range starts there), where a per-attempt claim on the range would cost a
        # conditional write for every new range of every interval.
        fresh = frozenset(
            index for index, shard_range in enumerate(ranges)
            if shard_range in new and shard_range.start.kind is not BoundaryKind.SHARD_START
        )  # fmt: skip
        return LoadJob(self, ranges, group_ranges(ranges, parents, partitions, weights, assignment), fresh=fresh)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe and without the password; ``mapping.transform`` travels as ``transform_path``."""
        return {
            **{setting.name: getattr(self, setting.name) for setting in fields(self)},
            "doris": _doris_to_dict(self.doris),
            "aws": asdict(self.aws),
            "load_options": _options_to_dict(self.load_options),
            "dead_letter_options": _options_to_dict(self.dead_letter_options),
            "mapping": {
                "metadata_columns": list(self.mapping.metadata_columns),
                "required_fields": list(self.mapping.required_fields),
            },
            "chunk_limits": asdict(self.chunk_limits),
            "retry_policy": asdict(self.retry_policy),
            "csv_columns": list(self.csv_columns) if self.csv_columns is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineConfig:
        return cls(
            **{
                **data,
                "doris": _doris_from_dict(data["doris"]),
                "aws": AwsSettings(**data["aws"]),
                "load_options": _options_from_dict(data["load_options"]),
                "dead_letter_options": _options_from_dict(data["dead_letter_options"]),
                "mapping": RecordMapping(
                    metadata_columns=tuple(data["mapping"]["metadata_columns"]),
                    required_fields=tuple(data["mapping"]["required_fields"]),
                ),
                "chunk_limits": ChunkLimits(**data["chunk_limits"]),
                "retry_policy": RetryPolicy(**data["retry_policy"]),
                "csv_columns": tuple(data["csv_columns"]) if data.get("csv_columns") is not None else None,
            }
        )


@dataclass(frozen=True)
class LoadJob:
    """Planned ranges of one interval plus how to read, map and load them.

    :param pipeline: the settings of the pipeline the ranges belong to.
    :param groups: indices into ``ranges``, one list per Spark partition, parents first.
    :param credentials_file: path of the 0600 credentials file executors read, if any.
    :param fresh: indices of the ranges this run's plan stored (``NEW``) that do not start at
        ``SHARD_START``: no earlier run has recorded anything of them, and a re-run of this job (a
        Spark task retry, a speculative copy) cuts the same chunks, so their loaders do not read
        the chunk log before the first pass (what another execution recorded is met by the
        put-once writes and Doris's labels).
    """

    pipeline: PipelineConfig
    ranges: tuple[ShardRange, ...]
    groups: tuple[tuple[int, ...], ...]
    credentials_file: str | None = None
    fresh: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.pipeline.doris.password:
            raise ConfigurationError("LoadJob must not carry the Doris password; use credentials_file")
        used = sorted(index for group in self.groups for index in group)
        if used != list(range(len(self.ranges))):
            raise ConfigurationError(f"groups must use every range exactly once, got {self.groups}")

    def partition_groups(self) -> list[list[int]]:
        """Range indices of each Spark partition (a list: PySpark rejects tuples)."""
        return [list(group) for group in self.groups]

    def to_json(self) -> str:
        return json.dumps(
            {
                "pipeline": self.pipeline.to_dict(),
                "ranges": [range_to_dict(r) for r in self.ranges],
                "groups": [list(g) for g in self.groups],
                "credentials_file": self.credentials_file,
                "fresh": sorted(self.fresh),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> LoadJob:
        data = json.loads(text)
        return cls(
            pipeline=PipelineConfig.from_dict(data["pipeline"]),
            ranges=tuple(range_from_dict(r) for r in data["ranges"]),
            groups=tuple(tuple(g) for g in data["groups"]),
            credentials_file=data["credentials_file"],
            fresh=frozenset(data.get("fresh", ())),
        )

    def doris_config(self, credentials: Credentials) -> DorisConnectionConfig:
        """The Doris connection with the password filled in on the executor."""
        return replace(self.pipeline.doris, password=credentials.doris_password)


def import_transform(path: str) -> Any:
    """The user transform named ``package.module:function``."""
    return import_function(path, "transform")


# --- JSON forms of the value objects -----------------------------------------------------------


def boundary_to_dict(boundary: Boundary) -> dict[str, Any]:
    return {
        "shard_id": boundary.shard_id,
        "instant_ms": boundary.instant_ms,
        "kind": boundary.kind.value,
        "position": boundary.position.encode() if boundary.position else None,
        "arrival_ms": boundary.arrival_ms,
    }


def boundary_from_dict(data: Mapping[str, Any]) -> Boundary:
    position = data.get("position")
    return Boundary(
        data["shard_id"], int(data["instant_ms"]), BoundaryKind(data["kind"]), Position.decode(position) if position else None,
        data.get("arrival_ms"),
    )


def range_to_dict(shard_range: ShardRange) -> dict[str, Any]:
    return {
        "pipeline_id": shard_range.pipeline_id,
        "stream_name": shard_range.stream_name,
        "shard_id": shard_range.shard_id,
        "interval_start_ms": shard_range.interval_start_ms,
        "interval_end_ms": shard_range.interval_end_ms,
        "start": boundary_to_dict(shard_range.start),
        "end": boundary_to_dict(shard_range.end),
        "state": shard_range.state.value,
        "chunk_limits": asdict(shard_range.chunk_limits) if shard_range.chunk_limits else None,
    }


def range_from_dict(data: Mapping[str, Any]) -> ShardRange:
    return ShardRange(
        pipeline_id=data["pipeline_id"],
        stream_name=data["stream_name"],
        shard_id=data["shard_id"],
        interval_start_ms=int(data["interval_start_ms"]),
        interval_end_ms=int(data["interval_end_ms"]),
        start=boundary_from_dict(data["start"]),
        end=boundary_from_dict(data["end"]),
        state=RangeState(data["state"]),
        chunk_limits=ChunkLimits(**data["chunk_limits"]) if data.get("chunk_limits") else None,
    )


def _doris_to_dict(config: DorisConnectionConfig) -> dict[str, Any]:
    data = asdict(config)
    data.pop("password")
    data["be_address_map"] = dict(config.be_address_map)
    return data


def _doris_from_dict(data: Mapping[str, Any]) -> DorisConnectionConfig:
    return DorisConnectionConfig(
        **{
            **data,
            "be_hosts": tuple(data["be_hosts"]),
            "allowed_redirect_hosts": tuple(data["allowed_redirect_hosts"]),
        }
    )


def _options_to_dict(options: StreamLoadOptions) -> dict[str, Any]:
    data = asdict(options)
    data["extra_headers"] = dict(options.extra_headers)
    return data


def _options_from_dict(data: Mapping[str, Any]) -> StreamLoadOptions:
    tuples = {name: tuple(data[name]) for name in ("columns", "jsonpaths") if data.get(name) is not None}
    return StreamLoadOptions(**{**data, **tuples})
