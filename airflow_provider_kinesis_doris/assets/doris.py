"""A Doris table as an Airflow Asset (a Dataset on Airflow 2.11): the loader's default outlet, and
what a downstream DAG schedules on.

URI: ``doris://<doris connection id>/<database>/<table>``. The authority is the connection id, not
the FE's host: outlets and schedules are fixed when a DAG file is parsed, and a DAG file should not
look up connections then (each parse would query the metadata database or the secrets backend).
OpenLineage gets the host-based name at run time (:func:`convert_asset_to_openlineage`), the
same name the loader reports for its output (``airflow_provider_kinesis_doris.lineage``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import Asset

from airflow_provider_kinesis_doris.core.doris.identifiers import split_table_name

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

SCHEME = "doris"


def create_asset(*, database: str, table: str, conn_id: str = "doris_default", extra: dict[str, Any] | None = None) -> Asset:
    """The Asset of ``database.table`` reached through the ``doris`` connection ``conn_id``."""
    return Asset(uri=f"{SCHEME}://{conn_id}/{database}/{table}", extra=extra)


def doris_table_asset(doris_table: str, conn_id: str = "doris_default") -> Asset:
    """The Asset of ``doris_table`` (``database.table``), as the loader declares it by default:
    ``schedule=[doris_table_asset("demo.events")]`` runs a DAG after each load of that table."""
    database, table = split_table_name(doris_table)
    return create_asset(database=database, table=table, conn_id=conn_id)


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normaliser of ``doris://`` URIs: a connection id and exactly database and table.

    :raises ValueError: naming what is missing or extra.
    """
    parts = uri.path.strip("/").split("/") if uri.path.strip("/") else []
    if not uri.netloc:
        raise ValueError(f"{SCHEME}:// URIs name the doris connection: {SCHEME}://<conn id>/<database>/<table>")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"{SCHEME}:// URIs end in /<database>/<table>, got path {uri.path!r}")
    if uri.query or uri.fragment:
        raise ValueError(f"{SCHEME}:// URIs carry no query or fragment, got {uri.geturl()!r}")
    return uri._replace(path=f"/{parts[0]}/{parts[1]}")


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> OpenLineageDataset:
    """The OpenLineage dataset of a ``doris://`` Asset: the connection's FE and query port, as
    :func:`airflow_provider_kinesis_doris.lineage.doris_dataset` names it."""
    from urllib.parse import urlsplit

    from airflow_provider_kinesis_doris.lineage import doris_dataset

    uri = sanitize_uri(urlsplit(asset.uri))
    database, table = uri.path.strip("/").split("/")
    return doris_dataset(uri.netloc, database, table)
