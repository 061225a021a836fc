"""The arguments that name one pipeline, shared by the loader, the rebalance operator and the
reshard sensor: ``stream_name``, ``checkpoint_table``, ``pipeline_id``, ``doris_table`` and
``aws_conn_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook


def loader_pipeline_id(stream_name: str, pipeline_id: str | None, doris_table: str | None) -> str:
    """The pipeline id the loader uses: ``pipeline_id`` if given, else the loader's default
    ``<stream>.<doris_table>`` (``KinesisToDorisOperator``).

    :raises ConfigurationError: neither is given.
    """
    if pipeline_id:
        return pipeline_id
    if doris_table:
        return f"{stream_name}.{doris_table}"
    raise ConfigurationError(
        f"Give pipeline_id or doris_table for stream {stream_name!r}: the topology is kept per pipeline"
    )


class PipelineArgumentsMixin:
    """Holds the pipeline's arguments, templates them, resolves the pipeline id and gives the
    AWS hook. List it before the Airflow base class::

        class MyOperator(PipelineArgumentsMixin, BaseOperator):
            template_fields = (*PipelineArgumentsMixin.template_fields, "other")

            def __init__(self, *, stream_name, checkpoint_table, ..., other, **kwargs):
                super().__init__(stream_name=stream_name, checkpoint_table=checkpoint_table, ..., **kwargs)
                self.other = other

    Subclasses keep these eight arguments in their own signature (Airflow validates and documents
    an operator's arguments from its ``__init__``) and pass them on.

    :param stream_name: the Kinesis stream.
    :param checkpoint_table: DynamoDB table of the pipeline's checkpoints.
    :param pipeline_id: the pipeline's id; default ``<stream_name>.<doris_table>``.
    :param doris_table: the loader's ``database.table``, to derive the default pipeline id.
    :param aws_conn_id: Airflow AWS connection (Kinesis and, via ``service_config``, DynamoDB).
    :param region_name: AWS region; the connection's by default.
    :param verify: whether to verify TLS certificates, or a CA bundle path; the connection's by default.
    :param botocore_config: ``botocore.config.Config`` arguments, instead of the connection's
        ``config_kwargs``, as on the amazon provider's operators.
    """

    template_fields: Sequence[str] = ("stream_name", "checkpoint_table", "pipeline_id", "doris_table")

    def __init__(
        self,
        *,
        stream_name: str,
        checkpoint_table: str,
        pipeline_id: str | None = None,
        doris_table: str | None = None,
        aws_conn_id: str | None = KinesisPipelineHook.default_conn_name,
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config
        self.stream_name = stream_name
        self.checkpoint_table = checkpoint_table
        self.pipeline_id = pipeline_id
        self.doris_table = doris_table
        self.aws_conn_id = aws_conn_id

    @property
    def resolved_pipeline_id(self) -> str:
        """``pipeline_id``, or the loader's default ``<stream_name>.<doris_table>`` (after templating)."""
        return loader_pipeline_id(self.stream_name, self.pipeline_id, self.doris_table)

    @cached_property
    def aws_hook(self) -> KinesisPipelineHook:
        """Kinesis and the checkpoint table, through ``aws_conn_id``."""
        return KinesisPipelineHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify, config=self.botocore_config
        )
