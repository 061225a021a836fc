"""OpenLineage for the loader: the stream it reads, the tables it writes, and how many rows.

Names. The OpenLineage naming spec (https://openlineage.io/docs/spec/naming) lists neither Kinesis
nor Doris, so the names follow its nearest entries:

* A stream is named like AWS Glue's entry, an ARN split before its resource:
  namespace ``arn:<partition>:kinesis:<region>:<account>``, name ``stream/<stream name>``. Joined by
  ``:`` they give the stream's ARN, which is unique across accounts and regions and which any other
  producer (a Firehose, a Lambda) can state the same way; ``kinesis://<region>`` would make two
  accounts' streams of one name the same dataset.
* A Doris table is named like the spec's MySQL entry, whose protocol and two-level hierarchy Doris
  shares: namespace ``doris://<FE host>:<query port>``, name ``<database>.<table>``. The scheme says
  Doris so the table is not taken for a MySQL one; the port is the FE's MySQL-protocol port
  (``query_port``, 9030), the address SQL tools reach the table at; ``DorisHook`` names tables the
  same way for the SQL operators, so the loader's output joins the lineage of queries run on the
  same connection.

The facets are imported through ``apache-airflow-providers-common-compat``; this module is used only
when the openlineage provider calls the operator's ``get_openlineage_facets_on_*`` methods.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.common.compat.openlineage.facet import Dataset, InputDataset, OutputDataset
    from airflow.providers.openlineage.extractors import OperatorLineage

_STREAM_ARN = re.compile(r"^(?P<namespace>arn:[^:]+:kinesis:[^:]+:[^:]+):(?P<name>stream/.+)$")


def kinesis_dataset(stream_arn: str, records: int | None = None) -> InputDataset:
    """The stream as an input; ``records``: how many this run read (``inputStatistics``).

    :raises ValueError: ``stream_arn`` is not a Kinesis stream ARN.
    """
    from airflow.providers.common.compat.openlineage.facet import InputDataset

    match = _STREAM_ARN.match(stream_arn)
    if match is None:
        raise ValueError(f"Not a Kinesis stream ARN: {stream_arn!r}")
    facets: dict[str, Any] = {}
    if records is not None:
        from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet

        facets["inputStatistics"] = InputStatisticsInputDatasetFacet(rowCount=records)
    return InputDataset(namespace=match["namespace"], name=match["name"], inputFacets=facets)


def doris_namespace(doris_conn_id: str) -> str:
    """``doris://<FE host>:<query port>`` of the ``doris`` connection, as ``DorisHook`` gives it
    to the SQL operators' lineage."""
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    return f"doris://{DorisHook(doris_conn_id=doris_conn_id).query_address}"


def doris_dataset(doris_conn_id: str, database: str, table: str) -> Dataset:
    """The table ``database.table`` of the ``doris`` connection, without facets."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    return Dataset(namespace=doris_namespace(doris_conn_id), name=f"{database}.{table}")


def doris_output(
    doris_conn_id: str, database: str, table: str, *, rows: int | None = None, columns: Sequence[tuple[str, str]] = ()
) -> OutputDataset:
    """The table as an output: ``columns`` (name, Doris type) in the schema facet, ``rows``
    this run loaded in ``outputStatistics``."""
    from airflow.providers.common.compat.openlineage.facet import (
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )

    named = doris_dataset(doris_conn_id, database, table)
    facets: dict[str, Any] = {}
    if columns:
        facets["schema"] = SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=n, type=t) for n, t in columns])
    output_facets = {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows)} if rows is not None else {}
    return OutputDataset(namespace=named.namespace, name=named.name, facets=facets, outputFacets=output_facets)


def loader_lineage(
    *,
    stream_arn: str,
    doris_conn_id: str,
    database: str,
    table: str,
    dead_letter_table: str,
    totals: Mapping[str, Any] | None = None,
    columns: Sequence[tuple[str, str]] = (),
    dead_letter_columns: Sequence[tuple[str, str]] = (),
) -> OperatorLineage:
    """What one run of the loader read and wrote.

    :param totals: the run's summary (``IntervalResult.summary``: ``records``, ``loaded``,
        ``dead_lettered``, and ``skipped_intervals``, whose loaded intervals count too); None
        before the run or when it failed: the datasets without counts. The dead-letter table is an
        output only when the run sent rows to it. Intervals no DAG run covered that the run loaded,
        or left to the next run, are named in the run facet ``kinesisDorisSkippedIntervals``.
    :param columns: the table's columns, for the schema facet.
    :param dead_letter_columns: the dead-letter table's columns.
    """
    from airflow.providers.openlineage.extractors import OperatorLineage

    outputs = [doris_output(doris_conn_id, database, table, rows=_count(totals, "loaded"), columns=columns)]
    dead_lettered = _count(totals, "dead_lettered")
    if dead_lettered:
        outputs.append(
            doris_output(doris_conn_id, database, dead_letter_table, rows=dead_lettered, columns=dead_letter_columns)
        )
    skipped = (totals or {}).get("skipped_intervals") or {}
    left = int((skipped.get("left_for_next_run") or {}).get("count", 0))
    run_facets = (
        {"kinesisDorisSkippedIntervals": _skipped_intervals_facet()(recovered=list(skipped["recovered"]), leftForNextRun=left)}
        if skipped.get("recovered") or left
        else {}
    )
    return OperatorLineage(
        inputs=[kinesis_dataset(stream_arn, _count(totals, "records"))], outputs=outputs, run_facets=run_facets
    )


def stream_arn_of(kinesis: Any, stream_name: str) -> str:
    """The ARN of the stream ``stream_name``, which names it as a dataset."""
    summary = kinesis.describe_stream_summary(StreamName=stream_name)
    return summary["StreamDescriptionSummary"]["StreamARN"]


def operator_lineage(
    stream_arn: str, doris_conn_id: str, names: tuple[str, str, str], totals: Mapping[str, Any] | None,
    *, with_schema: bool = False,
) -> OperatorLineage:  # fmt: skip
    """:func:`loader_lineage` of a ``KinesisToDorisOperator`` run.

    :param names: the table's database and name and the dead-letter table.
    :param with_schema: ask Doris for the table's columns, and for the dead-letter table's when
        the run sent rows to it.
    """
    from airflow_provider_kinesis_doris.hooks.doris import DorisHook

    database, table, dead_letter_table = names
    dead_lettered = bool(totals and totals.get("dead_lettered"))
    hook = DorisHook(doris_conn_id=doris_conn_id) if with_schema else None
    return loader_lineage(
        stream_arn=stream_arn, doris_conn_id=doris_conn_id, database=database, table=table,
        dead_letter_table=dead_letter_table, totals=totals,
        columns=hook.column_types(database, table) if hook else (),
        dead_letter_columns=hook.column_types(database, dead_letter_table) if hook and dead_lettered else (),
    )  # fmt: skip


def _count(totals: Mapping[str, Any] | None, name: str) -> int | None:
    """The run's count, with what it loaded of the intervals no DAG run covered."""
    if totals is None:
        return None
    recovered = (totals.get("skipped_intervals") or {}).get("loaded", [])
    return sum(int(part.get(name) or 0) for part in [totals, *recovered])


@functools.cache
def _skipped_intervals_facet() -> type:
    """A run facet naming the intervals no DAG run covered that the run loaded (ISO 8601 UTC, with
    their keys), and how many it left to the next run."""
    import attrs

    from airflow.providers.common.compat.openlineage.facet import RunFacet

    @attrs.define
    class KinesisDorisSkippedIntervalsRunFacet(RunFacet):  # type: ignore[misc]
        recovered: list[str] = attrs.field(factory=list)
        leftForNextRun: int = 0  # noqa: N815 - OpenLineage facets are camelCase

    return KinesisDorisSkippedIntervalsRunFacet
