"""Preflight of a Doris deployment: what the exactly-once argument assumes of the FE, the BEs,
the target table and the user, checked with SQL before the first load (issue 34).

Nothing in Doris reports these assumptions broken: a label window shorter than
``label_keep_seconds`` or a metadata column the table lacks load green and break exactly-once (or
the proof of it) silently. Each check gives one :class:`PreflightItem`: ok, wrong (with the fix),
or not verifiable (with why, e.g. the ADMIN privilege ``ADMIN SHOW ... CONFIG`` needs). A wrong
item is *fatal* when it breaks exactly-once; the others are warnings.

What Doris does with group commit and a labelled Stream Load (be/src/http/action/stream_load.cpp,
``_handle_group_commit`` / ``_can_group_commit``): a ``group_commit: off_mode`` header is never
group-committed, whatever the table says; the loader sends it with every labelled load
(``core.doris.client``), so a table's ``group_commit_mode`` (Doris 4.x, apache/doris#61242) or
``group_commit_interval_ms`` does not touch its labels. Only the BE config
``wait_internal_group_commit_finish`` turns every header into ``sync_mode`` and skips the check
that refuses a label beside group commit, so labelled loads are group-committed: that is fatal.

A BE the FE redirects Stream Loads to but the client may not follow (not allowed to receive the
credentials, or not resolvable from the worker) makes every load fail at its redirect, before a
row reaches Doris: exactly-once holds, the pipeline just loads nothing, so that item warns.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any

from airflow_provider_kinesis_doris.core.doris.connection import (
    DorisConnectionConfig,
    join_host_port,
    split_host_port,
)
from airflow_provider_kinesis_doris.core.doris.identifiers import qualified_name
from airflow_provider_kinesis_doris.core.doris.result import SqlResult
from airflow_provider_kinesis_doris.core.errors import DorisSqlError, readme_section

if TYPE_CHECKING:
    from airflow_provider_kinesis_doris.core.settings import PipelineConfig

SqlRunner = Callable[[str], SqlResult]
"""Runs one statement with the pipeline's database as the default (``DorisHook.run_sql``)."""

FE_CONFIG_STATEMENT = "ADMIN SHOW FRONTEND CONFIG LIKE '{}'"
BE_CONFIG_STATEMENT = "SHOW BACKEND CONFIG LIKE '{}'"
_ALL_PRIVILEGES = frozenset({"ADMIN_PRIV", "NODE_PRIV"})


class CheckStatus(str, Enum):
    OK = "ok"
    WRONG = "wrong"
    NOT_VERIFIABLE = "not verifiable"


@dataclass(frozen=True)
class PreflightItem:
    """One check: ``detail`` says what was found (or, not verifiable, why not), ``fix`` what to
    change when it is wrong; ``fatal`` when a wrong value breaks exactly-once, or makes Doris
    refuse the run's loads."""

    check: str
    status: CheckStatus
    detail: str
    fix: str | None = None
    fatal: bool = False

    def line(self) -> str:
        level = "FATAL" if self.status is CheckStatus.WRONG and self.fatal else self.status.value
        return f"[{level}] {self.check}: {self.detail}" + (f" Fix: {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class PreflightReport:
    """Every item of one preflight, and when it ran (UTC); ``name`` says of what (the Doris half,
    the AWS half, both)."""

    items: tuple[PreflightItem, ...]
    checked_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    name: str = "Doris"

    @property
    def fatal(self) -> tuple[PreflightItem, ...]:
        return tuple(item for item in self.items if item.status is CheckStatus.WRONG and item.fatal)

    @property
    def warnings(self) -> tuple[PreflightItem, ...]:
        return tuple(item for item in self.items if item.status is not CheckStatus.OK and item not in self.fatal)

    def item(self, check: str) -> PreflightItem:
        return next(item for item in self.items if item.check == check)

    def text(self) -> str:
        head = (
            f"{self.name} preflight at {self.checked_at.isoformat(timespec='seconds')}: {len(self.fatal)} fatal, "
            f"{len(self.warnings)} warnings, {len(self.items)} checks"
        )
        return "\n".join([head, *(item.line() for item in self.items)])


@dataclass(frozen=True)
class DorisPreflightSettings:
    """The pipeline settings the checks are made against.

    :param load_columns: ``load_options.columns`` (``target = expr`` entries included).
    :param sequence_col: ``load_options.sequence_col`` (``unique_key_sequence``).
    :param creates_dead_letter_table: the operator creates the dead-letter table when it is
        missing, which needs CREATE_PRIV on it (or its database).
    :param max_concurrent_loads: the pipeline's loads at once (each may add a 2PC probe).
    :param require_label_window: a label window the user may not read (no ADMIN) is fatal, not
        left to the run-time canary (``StateConfig(require_label_window_check=True)``).
    """

    database: str
    table: str
    dead_letter_table: str
    label_keep_seconds: int
    metadata_columns: tuple[str, ...] = ()
    load_columns: tuple[str, ...] | None = None
    jsonpaths: tuple[str, ...] | None = None
    sequence_col: str | None = None
    creates_dead_letter_table: bool = True
    max_concurrent_loads: int = 1
    require_label_window: bool = False

    @classmethod
    def from_pipeline(cls, config: PipelineConfig, **kwargs: Any) -> DorisPreflightSettings:
        """The settings of ``config``; ``kwargs`` give the operator-level ones."""
        options = config.load_options
        return cls(
            database=config.doris_database, table=config.doris_table, dead_letter_table=config.dead_letter_table,
            label_keep_seconds=config.doris.label_keep_seconds, metadata_columns=config.mapping.metadata_columns,
            load_columns=options.columns, jsonpaths=options.jsonpaths, sequence_col=options.sequence_col, **kwargs,
        )  # fmt: skip

    def digest(self) -> str:
        """A hash of every checked setting: a pipeline is checked again when it changes."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


def deep_connection_test(
    shallow: tuple[bool, str], preflight: Callable[[], PreflightReport] | None,
    unreachable: tuple[type[Exception], ...],
) -> tuple[bool, str]:  # fmt: skip
    """A hook's ``test_connection`` answer: the ``shallow`` test's, or with ``preflight`` (deep
    mode) also the report's, failing on a fatal item and listing every item that is not ok.

    :param unreachable: what ``preflight`` raises when it cannot reach the service: said, not raised.
    """
    connected, message = shallow
    if not connected or preflight is None:
        return shallow
    try:
        report = preflight()
    except unreachable as exc:
        return False, f"{message}; the preflight failed: {type(exc).__name__}: {exc}"
    problems = "".join(f"\n{item.line()}" for item in (*report.fatal, *report.warnings))
    verdict = "failed" if report.fatal else "passed"
    return not report.fatal, f"{message}; preflight {verdict} ({report.text().splitlines()[0]}){problems}"


def doris_preflight(
    run_sql: SqlRunner, settings: DorisPreflightSettings, connection: DorisConnectionConfig
) -> PreflightReport:
    """Run every Doris check of ``settings`` through ``run_sql``; ``connection`` is the Doris
    connection the loads go through (its redirect policy).

    :raises KinesisDorisError: the FE could not be reached (a refused statement is an item).
    """
    fe = _configs(run_sql, FE_CONFIG_STATEMENT, (
        "streaming_label_keep_max_second", "label_num_threshold", "stream_load_default_precommit_timeout_second",
        "max_running_txn_num_per_db",
    ))  # fmt: skip
    be = _configs(run_sql, BE_CONFIG_STATEMENT, ("wait_internal_group_commit_finish", "disable_stream_load_2pc"))
    tables = _tables(run_sql)
    return PreflightReport((
        _label_window(fe, settings),
        _label_count(fe, settings),
        _precommit_timeout(fe),
        _running_transactions(fe, settings),
        _refusable("group commit", lambda: _group_commit(run_sql, be, settings, tables)),
        _two_phase_commit(be),
        _refusable("table columns", lambda: _columns(run_sql, settings, tables)),
        _refusable("privileges", lambda: _privileges(run_sql, settings, tables)),
        _be_redirects(run_sql, connection),
    ))  # fmt: skip


def _refusable(check: str, run: Callable[[], PreflightItem]) -> PreflightItem:
    """The check's item, or not verifiable when Doris refuses one of its statements (a Doris
    without ``SHOW CREATE TABLE`` properties, a user who may not ``DESC`` the table)."""
    try:
        return run()
    except DorisSqlError as exc:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, f"Doris refused a statement of the check: {exc}")


# --- reading ---------------------------------------------------------------------------------------


class _Unreadable(str):
    """Why a value could not be read (Doris's refusal)."""


def _configs(run_sql: SqlRunner, statement: str, keys: Sequence[str]) -> dict[str, list[str] | _Unreadable]:
    """Each key's values (one per FE answering, one per BE for backend configs), or why not."""
    found: dict[str, list[str] | _Unreadable] = {}
    for key in keys:
        try:
            records = _records(run_sql(statement.format(key)))
        except DorisSqlError as exc:
            found[key] = _Unreadable(str(exc))
            continue
        found[key] = [str(record.get("Value")) for record in records if record.get("Key") == key]
    return found


def _records(result: SqlResult) -> list[dict[str, Any]]:
    return [dict(zip(result.columns, row)) for row in result.rows]


def _tables(run_sql: SqlRunner) -> set[str]:
    return {str(row[0]) for row in run_sql("SHOW TABLES").rows}


def _number(values: list[str] | _Unreadable, check: str, why: str) -> int | PreflightItem:
    """The smallest value of a config (the strictest FE), or the not-verifiable item."""
    if isinstance(values, _Unreadable):
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, f"{why} could not be read: {values}",
                             "run the preflight as a user with the ADMIN privilege, or check the value by hand")
    if not values:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, f"{why}: this Doris does not show the setting")
    return min(int(float(value)) for value in values)


# --- the checks --------------------------------------------------------------------------------------


def _label_window(fe: Mapping[str, list[str] | _Unreadable], settings: DorisPreflightSettings) -> PreflightItem:
    check = "label window"
    keep = _number(fe["streaming_label_keep_max_second"], check, "FE config streaming_label_keep_max_second")
    if isinstance(keep, PreflightItem) and settings.require_label_window:
        return replace(
            keep, status=CheckStatus.WRONG, fatal=True,
            detail=f"{keep.detail}; require_label_window_check is set, so the run does not rely on the canary",
            fix="let the preflight read it (a user with the ADMIN privilege for the check), or set "
                "StateConfig(require_label_window_check=False) to rely on the run-time canary",
        )  # fmt: skip
    if isinstance(keep, PreflightItem):
        return keep
    if keep >= settings.label_keep_seconds:
        return PreflightItem(check, CheckStatus.OK, f"streaming_label_keep_max_second {keep} s >= label_keep_seconds "
                                                    f"{settings.label_keep_seconds} s")
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"Doris forgets a Stream Load label after streaming_label_keep_max_second {keep} s, the pipeline relies on "
        f"it for label_keep_seconds {settings.label_keep_seconds} s: a chunk whose outcome was lost is loaded again "
        "after the label is forgotten (duplicates).",
        f"set label_keep_seconds of the Doris connection to {keep} or less, or raise the FE's "
        f"streaming_label_keep_max_second (ADMIN SET FRONTEND CONFIG (\"streaming_label_keep_max_second\" = "
        f"\"{settings.label_keep_seconds}\"), and in fe.conf to survive a restart).",
        fatal=True,
    )  # fmt: skip


def _label_count(fe: Mapping[str, list[str] | _Unreadable], settings: DorisPreflightSettings) -> PreflightItem:
    check = "label count"
    threshold = _number(fe["label_num_threshold"], check, "FE config label_num_threshold")
    if isinstance(threshold, PreflightItem):
        return threshold
    if threshold < 0:
        return PreflightItem(check, CheckStatus.OK, "label_num_threshold is negative: labels are kept by time only")
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"label_num_threshold {threshold}: Doris forgets finished labels beyond {threshold} per database before "
        f"their time is up, so the window is label_keep_seconds only while database {settings.database} finishes "
        f"fewer than {threshold} transactions in {settings.label_keep_seconds} s (every writer's loads, aborted "
        "ones and the refused-rows probes included); the run-time label canary stops a run when it is shorter.",
        f"ADMIN SET FRONTEND CONFIG (\"label_num_threshold\" = \"-1\") (and in fe.conf), or lower "
        "label_keep_seconds to the shortest time the database takes to finish that many transactions.",
    )  # fmt: skip


def _precommit_timeout(fe: Mapping[str, list[str] | _Unreadable]) -> PreflightItem:
    check = "precommit timeout"
    timeout = _number(fe["stream_load_default_precommit_timeout_second"], check,
                      "FE config stream_load_default_precommit_timeout_second")
    if isinstance(timeout, PreflightItem):
        return timeout
    return PreflightItem(check, CheckStatus.OK, (
        f"stream_load_default_precommit_timeout_second {timeout} s: the pipeline never leaves a chunk PRECOMMITTED "
        "(two_phase_commit is refused); a refused-rows probe orphaned by a dead worker holds a running "
        "transaction and its label until Doris aborts it after this time"
    ))  # fmt: skip


def _running_transactions(
    fe: Mapping[str, list[str] | _Unreadable], settings: DorisPreflightSettings
) -> PreflightItem:
    check = "running transactions"
    limit = _number(fe["max_running_txn_num_per_db"], check, "FE config max_running_txn_num_per_db")
    if isinstance(limit, PreflightItem):
        return limit
    if limit >= settings.max_concurrent_loads:
        return PreflightItem(check, CheckStatus.OK, f"max_running_txn_num_per_db {limit} >= the pipeline's "
                                                    f"{settings.max_concurrent_loads} loads at once")
    return PreflightItem(
        check, CheckStatus.WRONG,
        f"max_running_txn_num_per_db {limit} is below the pipeline's {settings.max_concurrent_loads} loads at once: "
        "loads beyond it are refused (\"larger than limit\") and retried with backoff.",
        "lower the pipeline's parallelism, or raise max_running_txn_num_per_db on the FE.",
    )  # fmt: skip


def _group_commit(
    run_sql: SqlRunner, be: Mapping[str, list[str] | _Unreadable], settings: DorisPreflightSettings,
    tables: set[str],
) -> PreflightItem:
    check = "group commit"
    mode = _table_group_commit_mode(run_sql, settings, tables)
    forced = be["wait_internal_group_commit_finish"]
    if isinstance(forced, _Unreadable):
        return PreflightItem(
            check, CheckStatus.NOT_VERIFIABLE,
            f"{mode}; the BE config wait_internal_group_commit_finish, which group-commits labelled loads "
            f"despite group_commit: off_mode, could not be read: {forced}",
            "run the preflight as a user with the ADMIN privilege, or check be.conf by hand",
        )  # fmt: skip
    if any(value.lower() == "true" for value in forced):
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"{mode}; a BE has wait_internal_group_commit_finish = true: it group-commits every Stream Load, ours "
            "with group_commit: off_mode and a label too (stream_load.cpp _handle_group_commit), so labels do not "
            "deduplicate a load sent twice.",
            "set wait_internal_group_commit_finish = false in be.conf of every BE (it is meant for tests).",
            fatal=True,
        )  # fmt: skip
    return PreflightItem(check, CheckStatus.OK, (
        f"{mode}; every labelled load is sent with group_commit: off_mode, which Doris never group-commits, and no "
        "BE forces group commit"
    ))


def _table_group_commit_mode(run_sql: SqlRunner, settings: DorisPreflightSettings, tables: set[str]) -> str:
    if settings.table not in tables:
        return f"table {settings.database}.{settings.table} does not exist"
    ddl = str(run_sql(f"SHOW CREATE TABLE {qualified_name(settings.database, settings.table)}").rows[0][1])
    properties = dict(re.findall(r'"([^"]+)"\s*=\s*"([^"]*)"', ddl.rpartition("PROPERTIES")[2]))
    mode = properties.get("group_commit_mode", "off_mode (not set)")
    return f"table group_commit_mode {mode}, group_commit_interval_ms {properties.get('group_commit_interval_ms')}"


def _two_phase_commit(be: Mapping[str, list[str] | _Unreadable]) -> PreflightItem:
    check = "two-phase commit"
    disabled = be["disable_stream_load_2pc"]
    if isinstance(disabled, _Unreadable):
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE,
                             f"the BE config disable_stream_load_2pc could not be read: {disabled}",
                             "run the preflight as a user with the ADMIN privilege, or check be.conf by hand")
    if any(value.lower() == "true" for value in disabled):
        return PreflightItem(
            check, CheckStatus.WRONG,
            "a BE has disable_stream_load_2pc = true: the probes that find the rows Doris refuses in a chunk "
            "are two-phase loads, so a chunk with refused rows fails instead of dead-lettering them.",
            "set disable_stream_load_2pc = false in be.conf of every BE.",
        )  # fmt: skip
    return PreflightItem(check, CheckStatus.OK, "Stream Load 2PC is enabled on every BE (refused-rows probes)")


def _columns(run_sql: SqlRunner, settings: DorisPreflightSettings, tables: set[str]) -> PreflightItem:
    check = "table columns"
    name = f"{settings.database}.{settings.table}"
    if settings.table not in tables:
        return PreflightItem(check, CheckStatus.WRONG, f"table {name} does not exist.",
                             f"create {name} ({readme_section('Tables and dead letters')} lists the metadata columns).",
                             fatal=True)
    described = run_sql(f"DESC {qualified_name(settings.database, settings.table)}")
    columns = {str(row[0]).lower() for row in described.rows}
    missing_metadata = [c for c in settings.metadata_columns if c.lower() not in columns]
    if missing_metadata:
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"{name} lacks the metadata columns {missing_metadata}: Doris drops a JSON key the table has no column "
            "for without an error, so rows load without the shard and position that tell a record's copies apart.",
            f"ALTER TABLE {name} ADD COLUMN for each of {missing_metadata} ({readme_section('Tables and dead letters')} "
            "gives the types), or "
            "remove them from metadata_columns.",
            fatal=True,
        )  # fmt: skip
    problems = _load_option_problems(settings, columns)
    if problems:
        return PreflightItem(check, CheckStatus.WRONG, f"{name}: " + "; ".join(problems) + ".",
                             "fix load_options (columns, jsonpaths, sequence_col) or the table.")
    if settings.sequence_col and not _has_sequence(run_sql, settings):
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"{name} has no sequence column, and load_options.sequence_col is {settings.sequence_col!r}: Doris "
            "refuses every load (function_column.sequence_col needs a UNIQUE KEY table with a sequence column).",
            f"create {name} as UNIQUE KEY with PROPERTIES (\"function_column.sequence_type\" = \"BIGINT\"), or "
            "turn unique_key_sequence off.",
        )  # fmt: skip
    return PreflightItem(check, CheckStatus.OK, f"{name} has every metadata column and load_options target")


def _load_option_problems(settings: DorisPreflightSettings, columns: set[str]) -> list[str]:
    problems = []
    if settings.load_columns:
        targets = [entry.partition("=")[0].strip().strip("`") for entry in settings.load_columns]
        derived = [entry.partition("=")[2] for entry in settings.load_columns if "=" in entry]
        missing = [t for t in targets if t.lower() not in columns
                   and not any(re.search(rf"\b{re.escape(t)}\b", expression) for expression in derived)]
        if missing:
            problems.append(f"load_options.columns names {missing}, neither table columns nor used in an expression")
    if settings.jsonpaths is not None:
        width = len(settings.load_columns) if settings.load_columns else len(columns)
        if len(settings.jsonpaths) > width:
            problems.append(f"{len(settings.jsonpaths)} jsonpaths for {width} columns")
    if settings.sequence_col and settings.sequence_col.lower() not in columns and not any(
        settings.sequence_col in entry for entry in settings.load_columns or ()
    ):
        problems.append(f"the sequence source column {settings.sequence_col!r} is not a column")
    return problems


def _has_sequence(run_sql: SqlRunner, settings: DorisPreflightSettings) -> bool:
    ddl = str(run_sql(f"SHOW CREATE TABLE {qualified_name(settings.database, settings.table)}").rows[0][1])
    return "UNIQUE KEY" in ddl and re.search(r'"function_column\.sequence_(col|type)"', ddl) is not None


def _privileges(run_sql: SqlRunner, settings: DorisPreflightSettings, tables: set[str]) -> PreflightItem:
    check = "privileges"
    records = _records(run_sql("SHOW GRANTS"))
    if not records:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, "SHOW GRANTS returned no row for the user")
    granted = _granted(records[0])
    needed = [("LOAD_PRIV", f"{settings.database}.{settings.table}"),
              ("LOAD_PRIV", f"{settings.database}.{settings.dead_letter_table}")]
    if settings.creates_dead_letter_table and settings.dead_letter_table not in tables:
        # Doris's CREATE TABLE checks CREATE on the table, granted at any level (checkTblPriv): a
        # grant on the table-to-be is enough, as docs/production.md recommends.
        needed.append(("CREATE_PRIV", f"{settings.database}.{settings.dead_letter_table}"))
    lacking = [(privilege, on) for privilege, on in needed if not _holds(granted, privilege, on)]
    if lacking:
        listed = ", ".join(f"{privilege} on {on}" for privilege, on in lacking)
        grants = "; ".join(f"GRANT {privilege} ON {on if '.' in on else on + '.*'} TO <user>"
                           for privilege, on in lacking)
        # Doris refuses each of those loads: the run could load nothing it must (fatal).
        return PreflightItem(check, CheckStatus.WRONG, f"the user lacks {listed}: those loads are refused.", grants,
                             fatal=True)
    return PreflightItem(check, CheckStatus.OK, "the user holds " + ", ".join(f"{p} on {on}" for p, on in needed))


def _granted(record: Mapping[str, Any]) -> dict[str, set[str]]:
    """Privileges by level ("*", "db", "db.table") from one SHOW GRANTS row (``internal.`` and
    old ``default_cluster:`` prefixes dropped; a catalog-level grant on ``internal`` is global)."""
    granted: dict[str, set[str]] = {"*": _privilege_set(record.get("GlobalPrivs"))}
    for column in ("CatalogPrivs", "DatabasePrivs", "TablePrivs"):
        for entry in str(record.get(column) or "").split(";"):
            name, _, privileges = entry.partition(":")
            if not privileges.strip():
                continue
            if name.strip().startswith("default_cluster") and ":" in privileges:
                name, _, privileges = privileges.partition(":")
            level = re.sub(r"^internal\.?", "", name.strip()) or "*"
            granted.setdefault(level, set()).update(_privilege_set(privileges))
    return granted


def _privilege_set(text: Any) -> set[str]:
    return {part.strip().upper() for part in str(text or "").split(",") if part.strip()}


def _holds(granted: Mapping[str, Iterable[str]], privilege: str, on: str) -> bool:
    database = on.partition(".")[0]
    levels = ("*", database, on)
    return any(privilege in set(granted.get(level, ())) or _ALL_PRIVILEGES & set(granted.get(level, ()))
               for level in levels)


def _be_redirects(run_sql: SqlRunner, connection: DorisConnectionConfig) -> PreflightItem:
    check = "BE redirects"
    if connection.be_hosts:
        return _resolving(check, connection.be_hosts, "loads go to be_hosts directly, without the FE redirect")
    try:
        backends = _records(run_sql("SHOW BACKENDS"))
    except DorisSqlError as exc:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, f"the BEs could not be listed: {exc}",
                             "run the preflight as a user with the ADMIN or NODE privilege (SHOW BACKENDS), or "
                             "load once and read the redirect error")  # fmt: skip
    followed = _redirect_targets(backends, connection)
    if not followed:
        return PreflightItem(check, CheckStatus.NOT_VERIFIABLE, "SHOW BACKENDS lists no alive BE")
    refused = [advertised for advertised, target in followed.items() if target is None]
    if refused:
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"the FE redirects Stream Loads to the BEs {refused}, which are not allowed to receive the credentials: "
            "every load fails at its redirect, before a row reaches Doris (exactly-once holds, nothing loads).",
            "add their hosts to allowed_redirect_hosts of the Doris connection, or map each to an address the "
            "workers reach with be_address_map ({\"<advertised host:port>\": \"<reachable host:port>\"}).",
        )  # fmt: skip
    return _resolving(check, [str(target) for target in followed.values()], "each BE the FE redirects to is allowed")


def _redirect_targets(
    backends: Iterable[Mapping[str, Any]], connection: DorisConnectionConfig
) -> dict[str, str | None]:
    """Each alive BE's advertised ``host:port`` (the FE redirects a Stream Load only to an alive BE,
    at its HTTP port) and where the client follows a redirect to it; None: it does not."""
    targets: dict[str, str | None] = {}
    for backend in backends:
        if str(backend.get("Alive")).lower() == "true":
            host, port = str(backend["Host"]), int(backend["HttpPort"])
            targets[join_host_port(host, port)] = connection.redirect_address(host, port)
    return targets


def _resolving(check: str, addresses: Sequence[str], what: str) -> PreflightItem:
    """The item of BE ``addresses`` (``host:port``) the client sends loads to: ok when each
    resolves here, else wrong (a warning: every load fails before a row reaches Doris)."""
    unresolved = [address for address in addresses if not _resolves(address)]
    if unresolved:
        return PreflightItem(
            check, CheckStatus.WRONG,
            f"{what}, but {unresolved} do not resolve from here: every load fails before a row reaches Doris "
            "(exactly-once holds, nothing loads).",
            "map each to an address the workers resolve with be_address_map of the Doris connection, or fix "
            "their DNS (the preflight resolves them where it runs: run it on a worker).",
        )  # fmt: skip
    return PreflightItem(check, CheckStatus.OK, f"{what}; {', '.join(addresses)} resolve")


def _resolves(address: str) -> bool:
    host, port = split_host_port(address)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # socket.gaierror, or a name IDNA cannot encode
        return False
    return True
