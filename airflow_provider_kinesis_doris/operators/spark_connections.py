"""The load job on a Spark cluster through the apache-spark provider's connections: ``spark``
(submitted with ``SparkSubmitHook``: master, deploy mode, queue, ``spark-binary``, keytab and
principal from the connection) and ``spark_connect`` (the URL and token from ``SparkConnectHook``).

Both need the provider (``pip install 'airflow-provider-kinesis-doris[apache-spark]'``); this
module imports it only when a connection is used.

.. seealso:: https://airflow.apache.org/docs/apache-airflow-providers-apache-spark/stable/connections/spark-submit.html
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from airflow_provider_kinesis_doris.core.errors import ConfigurationError

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.spark.runner import Submission

_EXTRA_HINT = "install the provider with its apache-spark extra (pip install 'airflow-provider-kinesis-doris[apache-spark]')"


class LoadJobSubmitter:
    """Sends the load job's ``Submission`` through a ``spark`` connection, one ``SparkSubmitHook``
    per submission: its output goes to the task log line by line while it runs, and ``on_kill``
    stops it (and, on YARN or Kubernetes, the application).

    Only client deploy mode: the job file and the report file stay in the task's private folder,
    which a driver on the cluster cannot reach.

    :param conn_id: the ``spark`` connection.
    :raises ConfigurationError: the provider is missing, or the connection asks for cluster mode.
    """

    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id
        self._hook: Any = None
        connection = _spark_submit_hook_class().get_connection(conn_id)
        self.auth_secret = connection.password or ""
        """The cluster's ``spark.authenticate`` secret: the connection's password, if any."""
        if connection.extra_dejson.get("deploy-mode") == "cluster":
            raise ConfigurationError(
                f"The spark connection {conn_id!r} sets deploy-mode 'cluster'; the load job runs its driver in "
                "client mode (its job and report files stay on the Airflow worker): remove the extra"
            )

    def __call__(self, submission: Submission) -> None:
        self._hook = _spark_submit_hook_class()(
            conn_id=self.conn_id,
            conf=dict(submission.conf),
            files=",".join(submission.files) or None,
            py_files=",".join(submission.py_files) or None,
            name=submission.name,
            application_args=list(submission.application_args),
            properties_file=submission.properties_file,
        )
        self._hook.submit(submission.application)

    def on_kill(self) -> None:
        """Stop the running submission, if any."""
        if self._hook is not None:
            self._hook.on_kill()


@functools.cache
def _spark_submit_hook_class() -> type:
    try:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    except ImportError as exc:
        raise ConfigurationError(f"spark_conn_id needs the apache-spark provider: {_EXTRA_HINT}") from exc

    class _LoadJobSubmitHook(SparkSubmitHook):
        def _build_spark_common_args(self) -> list[str]:
            args = super()._build_spark_common_args()
            # --properties-file replaces conf/spark-defaults.conf, where a cluster keeps its
            # settings, unless spark-submit (Spark 4) is told to read both.
            return [*args, "--load-spark-defaults"] if self._properties_file else args

    return _LoadJobSubmitHook


def spark_connect_url(conn_id: str) -> str:
    """The Spark Connect URL of a ``spark_connect`` connection, its token included: for the
    session builder only, never for a log."""
    try:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    except ImportError as exc:
        raise ConfigurationError(f"spark_connect_conn_id needs the apache-spark provider: {_EXTRA_HINT}") from exc
    return SparkConnectHook(conn_id=conn_id).get_connection_url()
