"""The botocore clients a loader builds on a worker (a Spark executor or the task's own process):
one botocore session per process on the default credential chain, or one per assumed role, and the
user's ``botocore_config``; and the client options every client of a pipeline runs with
(:func:`lean_client_config`, the driver's hook too). Apart from the loader so that what builds
credentials is read in one place."""

from __future__ import annotations

import copy
import functools
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from airflow_provider_kinesis_doris import __version__
from airflow_provider_kinesis_doris.core.settings import DRIVER_CREDENTIALS, AwsSettings, Credentials

_CLIENTS_LOCK = threading.Lock()

LEAN_CLIENT_OPTIONS: Mapping[str, Any] = {
    "parameter_validation": False,
    "user_agent": f"airflow-provider-kinesis-doris/{__version__}",
}
"""``botocore.config.Config`` options that save botocore's own CPU on every call, about a quarter
of a small call's (docs/benchmarks.md, *Where the driver's CPU goes*): the pipeline's requests are
built by its own code, well-formed, so botocore's client-side check of each one against the
service model is not needed (a request AWS refuses still fails with AWS's ``ValidationException``);
and a fixed user agent spares botocore assembling one from the platform twice a call (the
``user_agent_extra`` Airflow and the user add is still sent)."""


@functools.cache
def _botocore_session() -> Any:
    """One botocore session per process, on the process's default credential chain: a client
    built from it reuses the service models the first one loaded (a new session reads and parses
    them again, ~0.1 CPU-s a client)."""
    import botocore.session

    return botocore.session.get_session()


@functools.cache
def _assumed_role_session(role_arn: str, region_name: str | None, verify: bool | str | None, config_json: str) -> Any:
    """A botocore session with the credentials of ``role_arn``, assumed with the process's
    default chain; one per process, role and STS settings (``config_json``: the job's
    ``botocore_config`` as JSON, the cache needs a hashable key).

    The credentials are refreshable: botocore assumes the role again shortly before the role
    session expires, so a load longer than the session keeps working, and a process asks STS once
    per session, not once per client. Call with ``_CLIENTS_LOCK`` held (it builds a client from
    the shared session).
    """
    import botocore.credentials
    import botocore.session

    sts = _botocore_session().create_client(
        "sts", region_name=region_name, verify=verify, config=_client_config(json.loads(config_json))
    )

    def assume_role() -> dict[str, str]:
        # Named after the process, so CloudTrail tells the executors apart.
        answer = sts.assume_role(RoleArn=role_arn, RoleSessionName=f"kinesis-doris-{os.getpid()}")["Credentials"]
        return {
            "access_key": answer["AccessKeyId"],
            "secret_key": answer["SecretAccessKey"],
            "token": answer["SessionToken"],
            "expiry_time": answer["Expiration"].isoformat(),
        }

    session = botocore.session.get_session()
    # botocore has no public setter for refreshable credentials; the amazon provider's
    # BaseSessionFactory sets them the same way.
    session._credentials = botocore.credentials.RefreshableCredentials.create_from_metadata(
        metadata=assume_role(), refresh_using=assume_role, method="sts-assume-role"
    )
    return session


def _client_config(botocore_config: Mapping[str, Any] | None) -> Any:
    """The ``botocore.config.Config`` of the job's ``botocore_config``, if it has one. It is all
    the user's: the clients need no option of their own."""
    from botocore.config import Config

    # A copy: building a client rewrites the Config's ``retries`` dict in place (``max_attempts``
    # becomes ``total_max_attempts``), which would change the job's settings under it.
    return Config(**copy.deepcopy(botocore_config)) if botocore_config else None


def lean_client_config(config: Any = None) -> Any:
    """``config`` (a ``botocore.config.Config`` or None) over :data:`LEAN_CLIENT_OPTIONS`: an
    option the user set wins, e.g. ``parameter_validation=True`` to have botocore check requests."""
    from botocore.config import Config

    lean = Config(**LEAN_CLIENT_OPTIONS)
    return lean.merge(config) if config is not None else lean


def _with_connections(config: Any, connections: int) -> Any:
    """``config`` with a pool of at least ``connections`` (the user's larger pool stays)."""
    from botocore.config import Config

    return config if config.max_pool_connections >= connections else config.merge(Config(max_pool_connections=connections))


def aws_client(
    service: str, endpoint_url: str | None, aws: AwsSettings, credentials: Credentials, *, connections: int = 1
) -> Any:
    """A botocore client of ``service`` with the credentials ``aws.executor_credentials`` names,
    ``aws.verify`` and ``aws.botocore_config`` over :data:`LEAN_CLIENT_OPTIONS`.

    :param endpoint_url: the service's custom endpoint, else AWS's.
    :param credentials: the job's credentials file; its AWS keys count in ``"driver"`` mode only,
        and without keys there the process's default chain applies.
    :param connections: threads that share the client: its pool keeps at least as many
        connections (botocore's default is 10; past it urllib3 drops and reopens connections).
    """
    keys: dict[str, str | None] = {}
    if aws.executor_credentials == DRIVER_CREDENTIALS:
        keys = {
            "aws_access_key_id": credentials.aws_access_key_id,
            "aws_secret_access_key": credentials.aws_secret_access_key,
            "aws_session_token": credentials.aws_session_token,
        }
    # Credentials go to the client or to a session of their own, never into the shared session;
    # a session is not safe to build clients from in several threads at once (the in-process
    # runner's lanes).
    with _CLIENTS_LOCK:
        if aws.role_arn:
            config_json = json.dumps(aws.botocore_config, sort_keys=True)
            session = _assumed_role_session(aws.role_arn, aws.region_name, aws.verify, config_json)
        else:
            session = _botocore_session()
        return session.create_client(
            service, region_name=aws.region_name, endpoint_url=endpoint_url, verify=aws.verify,
            config=_with_connections(lean_client_config(_client_config(aws.botocore_config)), connections), **keys,
        )  # fmt: skip
