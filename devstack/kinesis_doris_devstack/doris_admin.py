"""The FE's configuration, its BE and its one user's privileges, as the stand-in's SQL answers
them: ``ADMIN SHOW FRONTEND CONFIG [LIKE]``, ``SHOW BACKEND CONFIG [LIKE]``, ``SHOW BACKENDS`` and
``SHOW GRANTS``.

Reply shapes follow Doris: ``ShowConfigCommand.FE_TITLE_NAMES`` / ``BE_TITLE_NAMES``
(fe/fe-core/src/main/java/org/apache/doris/nereids/trees/plans/commands/ShowConfigCommand.java,
older ``analysis/ShowConfigStmt.java``), which need the ADMIN privilege, and ``SHOW GRANTS``
(``AuthProcDir`` titles; ``Auth.getAuthInfo`` joins the privileges of a level with ``,`` and the
entries of a level with ``; ``), which any user may run for themselves. ``SHOW BACKENDS`` answers
``BackendsProcDir.TITLE_NAMES`` (fe/fe-core/src/main/java/org/apache/doris/common/proc/
BackendsProcDir.java) and needs the ADMIN or OPERATOR (Node_priv) privilege as
``analysis/ShowBackendsStmt.java`` checks it (Doris 2.x; the Nereids ``ShowBackendsCommand`` of
later versions asks SELECT on information_schema instead).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping

from kinesis_doris_devstack.doris_sql import DorisSqlError, StatementResult, TokenCursor, tokenize

FE_CONFIG_TITLES = ("Key", "Value", "Type", "IsMutable", "MasterOnly", "Comment")
BE_CONFIG_TITLES = ("BackendId", "Host", "Key", "Value", "Type", "IsMutable")
GRANTS_TITLES = (
    "UserIdentity", "Comment", "Password", "Roles", "GlobalPrivs", "CatalogPrivs", "DatabasePrivs",
    "TablePrivs", "ColPrivs", "ResourcePrivs", "CloudClusterPrivs", "CloudStagePrivs", "StorageVaultPrivs",
    "WorkloadGroupPrivs", "ComputeGroupPrivs",
)  # fmt: skip
BACKENDS_TITLES = (
    "BackendId", "Host", "HeartbeatPort", "BePort", "HttpPort", "BrpcPort", "ArrowFlightSqlPort", "LastStartTime",
    "LastHeartbeat", "Alive", "SystemDecommissioned", "TabletNum", "DataUsedCapacity", "TrashUsedCapacity",
    "AvailCapacity", "TotalCapacity", "UsedPct", "MaxDiskUsedPct", "RemoteUsedCapacity", "Tag", "ErrMsg", "Version",
    "Status", "HeartbeatFailureCounter", "CpuCores", "Memory", "RunningTasks", "NodeRole",
)  # fmt: skip
ROOT_GRANTS: Mapping[str, tuple[str, ...]] = {"*": ("Node_priv", "Admin_priv")}
"""What ``root`` holds in Doris: every privilege through Node_priv and Admin_priv."""
STANDIN_BACKEND_ID = 10002

# Doris's defaults (fe/fe-common/.../common/Config.java, be/src/common/config.cpp) for the settings
# the loader's guarantees rest on; values are strings as SHOW prints them.
_FE_DEFAULTS: dict[str, tuple[str, str]] = {
    "streaming_label_keep_max_second": ("43200", "long"),
    "label_keep_max_second": ("259200", "int"),
    "label_num_threshold": ("2000", "int"),
    "stream_load_default_precommit_timeout_second": ("3600", "int"),
    "max_running_txn_num_per_db": ("1000", "int"),
}
_BE_DEFAULTS: dict[str, tuple[str, str]] = {
    "wait_internal_group_commit_finish": ("false", "bool"),
    "disable_stream_load_2pc": ("false", "bool"),
}


class FrontendAdmin:
    """FE/BE configs and the privileges of the stand-in's user; thread-safe.

    :param user: the one user (``SHOW GRANTS`` names it ``'user'@'%'``).
    :param grants: privileges by level: ``"*"`` global, ``"db"`` a database, ``"db.table"`` a
        table, each a list of Doris privilege names (``Load_priv``, ``Create_priv``, ...). None:
        the user holds :data:`ROOT_GRANTS`.
    """

    def __init__(self, user: str, grants: Mapping[str, Iterable[str]] | None = None) -> None:
        self.user = user
        self._lock = threading.Lock()
        self._fe = dict(_FE_DEFAULTS)
        self._be = dict(_BE_DEFAULTS)
        self._grants: dict[str, tuple[str, ...]] = {}
        self.set_grants(ROOT_GRANTS if grants is None else grants)

    def set_fe_config(self, key: str, value: object) -> None:
        with self._lock:
            kind = self._fe.get(key, ("", "String"))[1]
            self._fe[key] = (_text(value), kind)

    def fe_config(self, key: str) -> str:
        with self._lock:
            return self._fe[key][0]

    def set_be_config(self, key: str, value: object) -> None:
        with self._lock:
            kind = self._be.get(key, ("", "String"))[1]
            self._be[key] = (_text(value), kind)

    def set_grants(self, grants: Mapping[str, Iterable[str]]) -> None:
        with self._lock:
            self._grants = {level: tuple(privileges) for level, privileges in grants.items()}

    def holds(self, privilege: str, database: str, table: str) -> bool:
        """Whether the user holds ``privilege`` (``Load_priv``, ...) on ``database.table``: granted
        globally, on the database or on the table, or implied by ``Admin_priv`` (Doris's
        ``PrivPredicate.LOAD`` is LOAD or ADMIN; ``Auth.checkTblPriv`` looks at the global, the
        database and the table level)."""
        wanted = {privilege.lower(), "admin_priv"}
        with self._lock:
            levels = [self._grants.get(level, ()) for level in ("*", database, f"{database}.{table}")]
        return any(granted.lower() in wanted for privileges in levels for granted in privileges)

    def is_admin(self) -> bool:
        with self._lock:
            return bool({"Admin_priv", "Node_priv"} & set(self._grants.get("*", ())))

    def execute(self, sql: str, backend: tuple[str, int]) -> StatementResult | None:
        """The answer to ``sql`` when it is one of this module's statements, else None;
        ``backend`` is the BE's advertised host and HTTP port."""
        tokens = tokenize(sql)
        cursor = TokenCursor(tokens)
        cursor.accept_word("ADMIN")
        if not cursor.accept_word("SHOW"):
            return None
        if cursor.accept_word("GRANTS"):
            cursor.expect_end()
            return self._grants_result()
        if cursor.accept_word("BACKENDS"):
            cursor.expect_end()
            self._require_admin("ADMIN/OPERATOR")
            return _backends_result(*backend)
        node = cursor.accept_one_of("FRONTEND", "BACKEND")
        if node is None or not cursor.accept_word("CONFIG"):
            return None
        pattern = cursor.next().value if cursor.accept_word("LIKE") else None
        cursor.expect_end()
        self._require_admin("ADMIN")
        with self._lock:
            configs = sorted((self._fe if node == "FRONTEND" else self._be).items())
        matching = [(key, value, kind) for key, (value, kind) in configs if _like(pattern, key)]
        if node == "FRONTEND":
            rows = tuple((key, value, kind, "true", "false", "") for key, value, kind in matching)
            return StatementResult("result_set", FE_CONFIG_TITLES, ("VARCHAR",) * 6, rows)
        rows = tuple((str(STANDIN_BACKEND_ID), "127.0.0.1", key, value, kind, "true") for key, value, kind in matching)
        return StatementResult("result_set", BE_CONFIG_TITLES, ("VARCHAR",) * 6, rows)

    def _require_admin(self, privileges: str) -> None:
        # ErrorCode.ERR_SPECIFIC_ACCESS_DENIED_ERROR, with the privileges the statement names.
        if not self.is_admin():
            raise DorisSqlError(
                f"Access denied; you need (at least one of) the ({privileges}) privilege(s) for this operation", 1227)

    def _grants_result(self) -> StatementResult:
        with self._lock:
            grants = dict(self._grants)
        databases = "; ".join(f"internal.{level}: {','.join(p)}" for level, p in grants.items() if level.count(".") == 0
                              and level != "*")
        tables = "; ".join(f"internal.{level}: {','.join(p)}" for level, p in grants.items() if level.count(".") == 1)
        row = (f"'{self.user}'@'%'", "", "Yes", "", ",".join(grants.get("*", ())) or None, None,
               databases or None, tables or None, None, None, None, None, None, None, None)  # fmt: skip
        return StatementResult("result_set", GRANTS_TITLES, ("VARCHAR",) * len(GRANTS_TITLES), (row,))


def _backends_result(host: str, http_port: int) -> StatementResult:
    """The stand-in's one BE, alive, at ``host`` and ``http_port`` (Doris's default other ports)."""
    row = (
        str(STANDIN_BACKEND_ID), host, "9050", "9060", str(http_port), "8060", "-1", "2026-01-01 00:00:00",
        "2026-01-01 00:00:00", "true", "false", "0", "0.000 B", "0.000 B", "1.000 TB", "1.000 TB", "0.00 %", "0.00 %",
        "0.000 B", '{"location" : "default"}', "", "doris-standin", "{}", "0", "2", "8.00 GB", "0", "mix",
    )  # fmt: skip
    return StatementResult("result_set", BACKENDS_TITLES, ("VARCHAR",) * len(BACKENDS_TITLES), (row,))


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _like(pattern: str | None, key: str) -> bool:
    # Doris's PatternMatcher: SQL LIKE, case-insensitive.
    if pattern is None:
        return True
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, key, re.I) is not None
