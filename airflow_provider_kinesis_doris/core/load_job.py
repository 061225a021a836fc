"""The load job: a pipeline's settings and the ranges planned for one interval, as plain JSON.

The job carries no secret. Executors take the Doris password (and, when
``AwsSettings.executor_credentials`` is ``"driver"``, AWS keys) from a 0600 credentials file whose
*path* is in the job (``credentials_file``), or from their environment
(``KINESIS_DORIS_DORIS_PASSWORD`` and boto3's usual chain), so nothing secret reaches a Spark
plan, a command line or a log. The settings themselves are ``core.settings``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_kinesis_doris.core.doris.connection import DorisConnectionConfig, RetryPolicy
from airflow_provider_kinesis_doris.core.doris.options import StreamLoadOptions
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.mapping import RecordMapping
from airflow_provider_kinesis_doris.core.model import Boundary, BoundaryKind, ChunkLimits, Position, RangeState, ShardRange
from airflow_provider_kinesis_doris.core.partitions import group_ranges
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials, PipelineConfig

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.plan import Plan


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

    @classmethod
    def of(
        cls,
        config: PipelineConfig,
        plan: Plan,
        weights: Mapping[str, float] | Callable[[], Mapping[str, float]] | None = None,
        assignment: Mapping[str, int] | None = None,
    ) -> LoadJob:
        """The load job of ``plan``'s ranges with ``config``'s settings, grouped into Spark partitions.

        :param weights: per shard id, what the rebalance step measured (1 if absent); or a function
            that reads them, called only when ranges share partitions (it costs a read per shard).
        :param assignment: the rebalance step's stored shard → partition assignment. When there is
            one, its partition count and placement win over ``parallelism``, which otherwise caps
            the partitions (default: one per range).
        """
        ranges = plan.ranges
        parents = {shard.shard_id: shard.parent_ids for shard in plan.shards}
        partitions = max(assignment.values()) + 1 if assignment else config.parallelism or max(len(ranges), 1)
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
        return cls(config, ranges, group_ranges(ranges, parents, partitions, weights, assignment), fresh=fresh)

    def binned(self, partitions: int) -> list[list[list[int]]]:
        """This job's groups dealt into at most ``partitions`` bins, each group whole (parents
        first), the largest first into the bin holding the fewest ranges: groups that were apart
        may share a bin, never the other way round."""
        bins: list[list[list[int]]] = [[] for _ in range(min(partitions, len(self.groups)))]
        for group in sorted(self.partition_groups(), key=len, reverse=True):
            min(bins, key=lambda held: sum(map(len, held))).append(group)
        return bins

    def partition_groups(self) -> list[list[int]]:
        """Range indices of each Spark partition (a list: PySpark rejects tuples)."""
        return [list(group) for group in self.groups]

    def to_json(self) -> str:
        return json.dumps(
            {
                "pipeline": pipeline_to_dict(self.pipeline),
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
            pipeline=pipeline_from_dict(data["pipeline"]),
            ranges=tuple(range_from_dict(r) for r in data["ranges"]),
            groups=tuple(tuple(g) for g in data["groups"]),
            credentials_file=data["credentials_file"],
            fresh=frozenset(data.get("fresh", ())),
        )

    def doris_config(self, credentials: Credentials) -> DorisConnectionConfig:
        """The Doris connection with the password filled in on the executor."""
        return replace(self.pipeline.doris, password=credentials.doris_password)


# --- JSON forms of the value objects -----------------------------------------------------------


def pipeline_to_dict(config: PipelineConfig) -> dict[str, Any]:
    """``config`` JSON-safe and without the password; ``mapping.transform`` travels as
    ``transform_path``."""
    return {
        **{setting.name: getattr(config, setting.name) for setting in fields(config)},
        "doris": _doris_to_dict(config.doris),
        "aws": asdict(config.aws),
        "load_options": _options_to_dict(config.load_options),
        "dead_letter_options": _options_to_dict(config.dead_letter_options),
        "mapping": {
            "metadata_columns": list(config.mapping.metadata_columns),
            "required_fields": list(config.mapping.required_fields),
        },
        "retry_policy": asdict(config.retry_policy),
        "csv_columns": list(config.csv_columns) if config.csv_columns is not None else None,
        "table_columns": list(config.table_columns) if config.table_columns is not None else None,
    }


def pipeline_from_dict(data: Mapping[str, Any]) -> PipelineConfig:
    return PipelineConfig(
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
            "retry_policy": RetryPolicy(**data["retry_policy"]),
            "csv_columns": tuple(data["csv_columns"]) if data.get("csv_columns") is not None else None,
            "table_columns": tuple(data["table_columns"]) if data.get("table_columns") is not None else None,
        }
    )


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
