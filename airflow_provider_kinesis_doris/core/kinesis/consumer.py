"""The registered stream consumer enhanced fan-out reads through: found, or registered and
waited for until ACTIVE, once per run on the driver, and kept across runs (a consumer costs by
the hour and by the shard, so deregistering is the user's call: ``docs/efo.md``).

.. seealso:: https://docs.aws.amazon.com/streams/latest/dev/building-enhanced-consumers-api.html
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.errors import ConfigurationError, aws_error_code

log = logging.getLogger(__name__)

CONSUMER_NAME_MAX = 128
CONSUMER_WAIT_S = 300.0
"""Registration takes seconds on AWS; a consumer being deleted may take longer to go."""
_POLL_S = 1.0


def consumer_name(pipeline_id: str) -> str:
    """The default consumer name of a pipeline: its id, in the characters Kinesis accepts
    (``[a-zA-Z0-9_.-]``, at most 128)."""
    name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in pipeline_id)
    return f"kinesis-doris-{name}"[:CONSUMER_NAME_MAX]


def ensure_consumer(
    client: Any, stream_name: str, name: str, *, timeout_s: float = CONSUMER_WAIT_S,
    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
) -> str:  # fmt: skip
    """The ARN of the stream's consumer ``name``, ACTIVE: registered if missing, waited for while
    CREATING, registered again once a DELETING one is gone.

    :raises ConfigurationError: the name is not one Kinesis accepts.
    :raises TimeoutError: the consumer did not become ACTIVE within ``timeout_s``.
    """
    if not name or len(name) > CONSUMER_NAME_MAX or not all(c.isalnum() or c in "_.-" for c in name):
        raise ConfigurationError(f"efo_consumer_name must be 1-{CONSUMER_NAME_MAX} of [a-zA-Z0-9_.-], got {name!r}")
    stream_arn = client.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    deadline = clock() + timeout_s
    while True:
        consumer = _describe(client, stream_arn, name)
        status = consumer["ConsumerStatus"] if consumer else None
        if status == "ACTIVE":
            return str(consumer["ConsumerARN"])  # type: ignore[index]
        if status is None:
            log.info("Registering stream consumer %s on %s for enhanced fan-out", name, stream_name)
            status = _register(client, stream_arn, name)
        if clock() >= deadline:
            raise TimeoutError(f"Stream consumer {name} of {stream_name} is {status or 'not registered'} after {timeout_s:.0f}s")
        sleep(_POLL_S)


def _describe(client: Any, stream_arn: str, name: str) -> dict[str, Any] | None:
    try:
        return client.describe_stream_consumer(StreamARN=stream_arn, ConsumerName=name)["ConsumerDescription"]
    except ClientError as error:
        if aws_error_code(error) == "ResourceNotFoundException":
            return None
        raise


def _register(client: Any, stream_arn: str, name: str) -> str:
    """Register the consumer; its status (CREATING), or REGISTERING when another run did first."""
    try:
        return str(client.register_stream_consumer(StreamARN=stream_arn, ConsumerName=name)["Consumer"]["ConsumerStatus"])
    except ClientError as error:
        # Another run registered it meanwhile: wait for that one.
        if aws_error_code(error) != "ResourceInUseException":
            raise
        return "REGISTERING"
