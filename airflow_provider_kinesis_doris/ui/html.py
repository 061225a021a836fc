"""Server-rendered HTML of the pipeline pages: plain tables and lists a person reads, no script.

Every value is escaped: shard ids, reasons and task ids come from outside (a stream, a DAG file).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d2430; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem; }
table { border-collapse: collapse; } td, th { border: 1px solid #c9d1dc; padding: .25rem .5rem; text-align: left; }
th { background: #eef2f7; } .muted { color: #6b7585; }
ul.lineage, ul.lineage ul { list-style: none; padding-left: 1.4rem; border-left: 2px solid #c9d1dc; }
ul.lineage { border-left: none; padding-left: 0; }
.shard { display: inline-block; margin: .15rem 0; padding: .1rem .4rem; border-radius: .3rem; background: #eef2f7; }
.state-OPEN { background: #dff3e4; } .state-CLOSED { background: #fff1cc; } .state-DRAINED { background: #e4e7ec; }
.grid { display: flex; flex-wrap: wrap; gap: .3rem; }
.cell { display: block; width: 11rem; padding: .3rem; border-radius: .3rem; font-size: .8rem; text-decoration: none; color: inherit; }
.status-loaded { background: #b7e4c2; } .status-caught-up { background: #cde3f7; } .status-pending { background: #fff1cc; }
.status-failed { background: #f6b8b8; } .status-left-to-its-own-run { background: #e4e7ec; }
.error { color: #a01919; }
"""


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], table_id: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""  # a two-column list of facts has none
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table id='{table_id}'>{thead}<tbody>{body}</tbody></table>"


def _lag(lag_ms: int | None) -> str:
    return "-" if lag_ms is None else f"{lag_ms / 1000:.1f} s"


def _pipeline_href(prefix: str, row: Mapping[str, Any]) -> str:
    return f"{prefix}/pipelines/{quote(row['dag_id'], safe='')}/{quote(row['task_id'], safe='')}"


def run_href(dag_id: str, run_id: str) -> str:
    """The DAG run in Airflow 3's UI."""
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def pipelines_page(rows: Sequence[Mapping[str, Any]], prefix: str) -> str:
    if not rows:
        return _page("Kinesis → Doris", "<h1>Kinesis → Doris pipelines</h1><p>No pipeline you may read.</p>")
    table = _table(
        ["pipeline", "DAG", "stream", "table", "last run", "state"],
        (
            [
                f"<a href='{escape(_pipeline_href(prefix, row))}'>{escape(row['pipeline_id'])}</a>",
                escape(row["dag_id"]),
                escape(row["stream_name"]),
                escape(row["doris_table"]),
                escape(f"{row['last_run']['interval_end']} ({row['last_run']['state']})") if row["last_run"] else "-",
                escape(row["state"]),
            ]
            for row in rows
        ),
        "pipelines",
    )
    return _page("Kinesis → Doris", f"<h1>Kinesis → Doris pipelines</h1>{table}")


def pipeline_page(data: Mapping[str, Any], prefix: str) -> str:
    pipeline = data["pipeline"]
    parts = [
        f"<p><a href='{escape(prefix)}/'>All pipelines</a></p>",
        f"<h1>Pipeline {escape(pipeline['pipeline_id'])}</h1>",
        _overview(data),
        _lineage(data),
        _grid(data),
        _waiting(data),
        _dead_letters(data),
        _verdicts(data),
    ]
    return _page(f"{pipeline['pipeline_id']} · Kinesis → Doris", "".join(parts))


def _overview(data: Mapping[str, Any]) -> str:
    pipeline, doris = data["pipeline"], data["doris"]
    rows = [
        ("DAG / task", f"{escape(pipeline['dag_id'])} / {escape(pipeline['task_id'])}"),
        ("stream", escape(pipeline["stream_name"])),
        ("Doris table", escape(pipeline["doris_table"])),
        ("checkpoint table", escape(pipeline["checkpoint_table"])),
        ("state", f"<span id='pipeline-state'>{escape(pipeline['state'])}</span>"),
        ("lag (high-water marks)", _lag(pipeline["lag_ms"])),
        ("rows loaded (the runs' summaries, grid window)", f"<span id='rows-loaded'>{data['rows_loaded']}</span>"),
        ("rows in Doris", f"<span id='rows-in-doris'>{doris['rows']}</span>" if doris["rows"] is not None
         else f"<span class='error'>{escape(str(doris['error']))}</span>"),
    ]  # fmt: skip
    if data["store_error"]:
        rows.append(("checkpoint table", f"<span class='error'>{escape(data['store_error'])}</span>"))
    return _table(["", ""], rows, "overview")


def _lineage(data: Mapping[str, Any]) -> str:
    store = data["store"]
    if not store:
        return "<h2>Shard lineage</h2><p class='muted'>The checkpoint table could not be read.</p>"
    shards = {shard["shard_id"]: shard for shard in store["shards"]}
    roots = [s for s in store["shards"] if not any(parent in shards for parent in s["parents"])]

    def node(shard: Mapping[str, Any], drawn: set[str]) -> str:
        others = [p for p in shard["parents"] if p in shards]
        merged = f" <span class='muted'>(merged from {escape(', '.join(others))})</span>" if len(others) > 1 else ""
        label = (
            f"<span class='shard state-{escape(shard['state'])}' data-shard='{escape(shard['shard_id'])}' "
            f"data-parents='{escape(' '.join(shard['parents']))}'>{escape(shard['shard_id'])} · {escape(shard['state'])}"
            f" · loaded through {escape(shard['loaded_through'])} · lag {_lag(shard['lag_ms'])}</span>{merged}"
        )
        if shard["shard_id"] in drawn:  # a merged child is drawn in full under its first parent only
            return f"<li><span class='shard state-{escape(shard['state'])}'>{escape(shard['shard_id'])}</span> <span class='muted'>(above)</span></li>"
        drawn.add(shard["shard_id"])
        children = "".join(node(shards[c], drawn) for c in shard["children"] if c in shards)
        return f"<li>{label}{f'<ul>{children}</ul>' if children else ''}</li>"

    drawn: set[str] = set()
    tree = "".join(node(root, drawn) for root in roots)
    return f"<h2>Shard lineage</h2><ul class='lineage' id='lineage'>{tree}</ul>"


def _grid(data: Mapping[str, Any]) -> str:
    dag_id = data["pipeline"]["dag_id"]
    cells = []
    for cell in data["intervals"]:
        status = cell["status"]
        by = f"<br>by {escape(cell['caught_up_by'])}" if cell["caught_up_by"] else ""
        cells.append(
            f"<a class='cell status-{status.replace(' ', '-')}' data-status='{escape(status)}' "
            f"data-start='{escape(cell['start'])}' href='{escape(run_href(dag_id, cell['run_id']))}' target='_top'>"
            f"{escape(cell['start'])}<br><b>{escape(status)}</b>{by}<br>{_cell_counts(cell)}</a>"
        )
    body = "".join(cells) or "<p class='muted'>No DAG run in this window.</p>"
    return f"<h2>Intervals of the last {data['hours']:g} h</h2><div class='grid' id='intervals'>{body}</div>"


def _cell_counts(cell: Mapping[str, Any]) -> str:
    if cell["rows_loaded"] is None:
        return "<span class='muted'>no summary</span>"
    return f"{cell['rows_loaded']} rows · {cell['dead_lettered']} dead letters"


def _waiting(data: Mapping[str, Any]) -> str:
    items = "".join(f"<li>{escape(line)}</li>" for line in data["waiting"])
    body = f"<ul id='waiting'>{items}</ul>" if items else "<p class='muted' id='waiting'>Nothing waits.</p>"
    return f"<h2>What waits and why</h2>{body}"


def _dead_letters(data: Mapping[str, Any]) -> str:
    doris = data["doris"]
    if doris["dead_letters_by_reason"] is None:
        body = f"<p class='error'>{escape(str(doris['dead_letters_error']))}</p>"
    elif not doris["dead_letters_by_reason"]:
        body = "<p class='muted'>No dead letter.</p>"
    else:
        rows = sorted(doris["dead_letters_by_reason"].items(), key=lambda item: -item[1])
        body = _table(["reason", "dead letters"], ([escape(reason), str(count)] for reason, count in rows), "dead-letters")
    return f"<h2>Dead letters ({escape(doris['dead_letter_table'])})</h2>{body}"


def _verdicts(data: Mapping[str, Any]) -> str:
    preflight, audit = data["preflight"], data["audit"]
    warnings = "".join(f"<li>{escape(str(w))}</li>" for w in preflight["warnings"])
    preflight_html = f"<p id='preflight'>Preflight: <b>{escape(preflight['verdict'])}</b>" + (
        f" <span class='muted'>(settings digest {escape(preflight['digest'][:12])})</span>" if preflight["digest"] else ""
    ) + "</p>" + (f"<ul>{warnings}</ul>" if warnings else "")  # fmt: skip
    if audit is None:
        audit_html = "<p id='audit' class='muted'>No audit has run.</p>"
    else:
        verdict = "every record once" if audit["ok"] else f"{audit['differences']} difference(s)"
        firsts = "".join(f"<li>{escape(str(d))}</li>" for d in audit["first_differences"])
        audit_html = (
            f"<p id='audit'>Last audit ({escape(str(audit['run_id']))}): <b>{escape(verdict)}</b>, "
            f"{audit['rows_found']} rows over {escape(str(audit['span']))}</p>" + (f"<ul>{firsts}</ul>" if firsts else "")
        )
    return f"<h2>Preflight and audit</h2>{preflight_html}{audit_html}"
