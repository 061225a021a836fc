"""The base of the operators and the sensor that act on one pipeline: the arguments naming it
(``stream_name``, ``checkpoint_table``, ``pipeline_id``, ``doris_table``) and its AWS client
settings (``aws_conn_id``, ``region_name``, ``verify``, ``botocore_config``), declared once and
taken by subclasses through ``**kwargs``, as the amazon provider's ``AwsBaseOperator`` takes its
own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import BaseOperator, XComArg

from airflow_provider_kinesis_doris.config import Check, holds_template
from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.core.stores.buckets import check_pipeline_id
from airflow_provider_kinesis_doris.core.value_checks import (
    check_optional_mapping,
    check_optional_text,
    check_text,
    check_verify,
)
from airflow_provider_kinesis_doris.hooks.kinesis_pipeline import KinesisPipelineHook

if TYPE_CHECKING:
    import jinja2
    from airflow.providers.common.compat.sdk import Context


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


PIPELINE_TEMPLATE_FIELDS: tuple[str, ...] = aws_template_fields(
    "stream_name", "checkpoint_table", "pipeline_id", "doris_table", "botocore_config"
)
"""The pipeline's arguments, all templated; with the amazon provider's generic ones
(``aws_conn_id``, ``region_name``, ``verify``), so that a DAG's serialized form keeps them."""

PIPELINE_ARGUMENT_CHECKS: Mapping[str, Check] = {
    "stream_name": check_text,
    "checkpoint_table": check_text,
    "pipeline_id": check_pipeline_id,
    "doris_table": check_optional_text,
    "aws_conn_id": check_optional_text,
    "region_name": check_optional_text,
    "verify": check_verify,
    "botocore_config": check_optional_mapping,
}
"""Each pipeline argument's check, for an operator on which ``doris_table`` is optional."""

TABLE_REQUIRED_CHECKS: Mapping[str, Check] = {**PIPELINE_ARGUMENT_CHECKS, "doris_table": check_text}
"""The pipeline arguments' checks for an operator that needs ``doris_table``."""


def rendered_later(value: Any) -> bool:
    """Whether Airflow sets ``value`` of a template field when the task runs: a template, or
    another task's XCom."""
    return holds_template(value) or isinstance(value, XComArg)


class KinesisPipelineBaseOperator(BaseOperator):
    """Holds, checks and templates the pipeline's arguments, resolves the pipeline id and gives
    the AWS hook. A subclass takes these arguments through ``**kwargs``; a sensor lists this class
    before ``BaseSensorOperator``::

        class MyOperator(KinesisPipelineBaseOperator):
            template_fields = aws_template_fields(*PIPELINE_TEMPLATE_FIELDS, "other")

            def __init__(self, *, other: str, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                self.other = other
                self.check_arguments({"other": check_text})

    Being a ``BaseOperator``, its ``__init__`` is one Airflow reads: a missing argument, an
    unknown one, ``default_args`` and ``.partial()`` treat these arguments as the subclass's own.

    Each argument is checked once: a literal when the operator is built (the DAG file's parse), a
    template or another task's XCom once rendered. Each raises :class:`ConfigurationError` naming the argument.

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

    template_fields: Sequence[str] = PIPELINE_TEMPLATE_FIELDS
    pipeline_argument_checks: ClassVar[Mapping[str, Check]] = PIPELINE_ARGUMENT_CHECKS
    """The checks of the pipeline's arguments; :data:`TABLE_REQUIRED_CHECKS` where ``doris_table``
    is needed."""

    def __init__(
        self,
        *,
        stream_name: str,
        doris_table: str | None = None,
        checkpoint_table: str,
        pipeline_id: str | None = None,
        aws_conn_id: str | None = KinesisPipelineHook.default_conn_name,
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream_name = stream_name
        self.checkpoint_table = checkpoint_table
        self.pipeline_id = pipeline_id
        self.doris_table = doris_table
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config
        self._checks_once_rendered: dict[str, Check] = {}
        self.check_arguments(self.pipeline_argument_checks)

    def check_arguments(self, checks: Mapping[str, Check]) -> None:
        """Run each check on its attribute now if the value is literal; a templated field's once
        Airflow has rendered it (:meth:`render_template_fields`).

        :raises ConfigurationError: the first literal argument its check refuses.
        """
        for name, check in checks.items():
            value = getattr(self, name)
            if name in self.template_fields and rendered_later(value):
                self._checks_once_rendered[name] = check
            else:
                check(name, value)

    def render_template_fields(self, context: Context, jinja_env: jinja2.Environment | None = None) -> None:
        super().render_template_fields(context, jinja_env)
        # Only now are the templated values known: a bad one fails before anything is looked up.
        for name, check in self._checks_once_rendered.items():
            check(name, getattr(self, name))

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
