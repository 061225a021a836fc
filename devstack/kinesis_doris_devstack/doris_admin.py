"""Users, privileges and the FE's and BE's configuration, as the stand-in answers the statements
a Doris operator sets Doris up with: ``CREATE USER``, ``DROP USER``, ``GRANT``, ``REVOKE``,
``SHOW [ALL] GRANTS [FOR]``, ``ADMIN SET [ALL] FRONTEND CONFIG``, ``[ADMIN] SHOW FRONTEND CONFIG``,
``SHOW BACKEND CONFIG``, ``SHOW BACKENDS`` and the BE's ``POST /api/update_config``.

Reply shapes and refusals follow Doris: ``ShowConfigCommand.FE_TITLE_NAMES`` / ``BE_TITLE_NAMES``
(fe/fe-core/src/main/java/org/apache/doris/nereids/trees/plans/commands/ShowConfigCommand.java,
older ``analysis/ShowConfigStmt.java``), which need the ADMIN privilege; ``SHOW GRANTS``
(``AuthProcDir`` titles; ``Auth.getAuthInfo`` joins the privileges of a level with ``,`` and the
entries of a level with ``; ``), which any user may run for themselves; ``SHOW BACKENDS``
(``BackendsProcDir.TITLE_NAMES``), which needs ADMIN or OPERATOR (Node_priv) as
``analysis/ShowBackendsStmt.java`` checks it; users and grants as
fe/fe-core/src/main/java/org/apache/doris/mysql/privilege/Auth.java keeps them, with the rules of
``analysis/GrantStmt.checkTablePrivileges`` and ``PrivPredicate`` (Admin_priv implies every table
privilege, GRANT needs Admin_priv or Grant_priv); FE configs as ``ConfigBase.setMutableConfig``
sets them; BE configs as be/src/service/http/action/config_action.cpp ``handle_update_config``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kinesis_doris_devstack.doris_ddl import parse_properties
from kinesis_doris_devstack.doris_schema import EXEC_OK, DorisSqlError, StatementResult
from kinesis_doris_devstack.doris_tokens import Token, TokenCursor, tokenize

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
# Doris's privileges in ``Privilege`` index order, the order its messages list them in.
PRIVILEGES = ("Node_priv", "Admin_priv", "Grant_priv", "Select_priv", "Load_priv", "Alter_priv", "Create_priv",
              "Drop_priv", "Usage_priv")
# ``GRANT ALL`` (and READ_WRITE) as the GRANT manual page lists it.
_ALL_PRIVILEGES = ("Select_priv", "Load_priv", "Alter_priv", "Create_priv", "Drop_priv")
# ``PrivPredicate.SHOW``: a user "sees" a table holding any of these on it.
_SHOW_PRIVILEGES = frozenset({"Admin_priv", "Select_priv", "Load_priv", "Alter_priv", "Create_priv", "Drop_priv"})
_GLOBAL_ONLY = frozenset({"Admin_priv", "Node_priv"})
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
# What ``update_config`` may change at run time: ``wait_internal_group_commit_finish`` is a
# ``DEFINE_Bool`` (be/src/common/config.cpp), fixed until restart; ``disable_stream_load_2pc`` was a
# ``CONF_mBool`` until Doris 1.2 removed it.
_BE_MUTABLE = frozenset({"disable_stream_load_2pc"})


@dataclass
class _Account:
    """A user as ``Auth`` keeps it: password, host pattern and privileges by level."""

    password: str
    host: str = "%"
    grants: dict[str, set[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Session:
    """Who runs a statement: ``user`` of ``admin``, connected from ``remote_ip``. The SQL engine
    checks privileges against it (:class:`kinesis_doris_devstack.doris_schema.Grantee`)."""

    admin: FrontendAdmin
    user: str
    remote_ip: str = "127.0.0.1"
    unchecked: bool = False
    """The in-process API (``DorisServer.execute_sql``): a test's own way in, holding every privilege."""

    def holds(self, privilege: str, db: str = "", table: str = "") -> bool:
        return self.unchecked or self.admin.holds(self.user, privilege, db, table)

    def sees(self, db: str, table: str = "") -> bool:
        return self.unchecked or self.admin.sees(self.user, db, table)


class FrontendAdmin:
    """The FE's users and their privileges, FE/BE configs; thread-safe.

    :param user: the stand-in's first user (Doris's ``root``): it logs in with ``password``.
    :param password: its password.
    :param grants: its privileges by level (``"*"`` global, ``"db"``, ``"db.table"``), each a list
        of Doris privilege names (``Load_priv``, ...). None: :data:`ROOT_GRANTS`.
    :param on_fe_config: called with (key, value) whenever an FE config is set, so the settings
        the stand-in models take effect (the label window, the precommit timeout).
    :param fe_configs: FE configs the stand-in started with (shown; they are in effect already).
    """

    def __init__(self, user: str, password: str, grants: Mapping[str, Iterable[str]] | None = None,
                 on_fe_config: Callable[[str, str], None] | None = None,
                 fe_configs: Mapping[str, object] | None = None) -> None:
        self.user = user
        self._lock = threading.RLock()
        self._fe = dict(_FE_DEFAULTS)
        self._fe.update({key: (_text(value), self._fe[key][1]) for key, value in (fe_configs or {}).items()})
        self._be = dict(_BE_DEFAULTS)
        self._on_fe_config = on_fe_config
        self._users: dict[str, _Account] = {user: _Account(password)}
        self.set_grants(ROOT_GRANTS if grants is None else grants)

    # --- configs ---------------------------------------------------------------------

    def set_fe_config(self, key: str, value: object) -> None:
        with self._lock:
            kind = self._fe.get(key, ("", "String"))[1]
            self._fe[key] = (_text(value), kind)
        if self._on_fe_config is not None:
            self._on_fe_config(key, _text(value))

    def fe_config(self, key: str) -> str:
        with self._lock:
            return self._fe[key][0]

    def set_be_config(self, key: str, value: object) -> None:
        with self._lock:
            kind = self._be.get(key, ("", "String"))[1]
            self._be[key] = (_text(value), kind)

    def update_be_config(self, params: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        """``POST /api/update_config?k=v[&persist=true]``: one result per config, as
        ``ConfigAction::handle_update_config`` answers; no config at all gives ``[]``."""
        results = []
        msg = ""  # Doris never resets it: a config after a failed one repeats the failure's msg
        for key, value in params:
            if key == "persist":
                continue
            reason = self._be_config_refusal(key)
            if reason is None:
                self.set_be_config(key, value)
            else:
                msg = f"set {key}={value} failed, reason: {reason}."
            results.append({"config_name": key, "status": "OK" if reason is None else "BAD", "msg": msg})
        return results

    def _be_config_refusal(self, key: str) -> str | None:
        # config::set_config: an unknown name, then an immutable one (Status::NotFound / NotSupported).
        with self._lock:
            known = key in self._be
        if not known:
            return f"[NOT_FOUND]'{key}' is not found"
        if key not in _BE_MUTABLE:
            return f"[NOT_IMPLEMENTED_ERROR]'{key}' is not support to modify"
        return None

    # --- users and privileges ---------------------------------------------------------

    def set_grants(self, grants: Mapping[str, Iterable[str]], user: str | None = None) -> None:
        """Give ``user`` (default: the first user) exactly these privileges by level."""
        with self._lock:
            account = self._users[user or self.user]
            account.grants = {level: {_canonical_privilege(p) for p in privileges} for level, privileges in grants.items()}

    def authenticate(self, user: str, password: str) -> bool:
        with self._lock:
            account = self._users.get(user)
            return account is not None and account.password == password

    def password_of(self, user: str) -> str | None:
        """The password ``user`` logs in with, None for no such user."""
        with self._lock:
            account = self._users.get(user)
            return None if account is None else account.password

    def holds(self, user: str, privilege: str, db: str = "", table: str = "") -> bool:
        """Whether ``user`` holds ``privilege`` globally, on ``db`` or on ``db.table``; Admin_priv
        implies every privilege but Node_priv (``PrivPredicate``: LOAD is LOAD or ADMIN, ...)."""
        levels = ["*", *([db] if db else []), *([f"{db}.{table}"] if db and table else [])]
        granted = self._granted(user, levels)
        return privilege in granted or (privilege != "Node_priv" and "Admin_priv" in granted)

    def sees(self, user: str, db: str, table: str = "") -> bool:
        """``PrivPredicate.SHOW``: any table privilege on the table, or for a database on it or on
        one of its tables (``SHOW DATABASES`` / ``SHOW TABLES`` list only what the user sees)."""
        with self._lock:
            account = self._users.get(user)
            levels = [] if account is None else list(account.grants)
        if table:
            wanted = ["*", db, f"{db}.{table}"]
        else:
            wanted = ["*", db, *(level for level in levels if level.startswith(f"{db}."))]
        return bool(_SHOW_PRIVILEGES & self._granted(user, wanted))

    def _granted(self, user: str, levels: Iterable[str]) -> set[str]:
        with self._lock:
            account = self._users.get(user)
            if account is None:
                return set()
            return set().union(*(account.grants.get(level, set()) for level in levels))

    # --- statements --------------------------------------------------------------------

    def execute(self, sql: str, backend: tuple[str, int], session: Session) -> StatementResult | None:
        """The answer to ``sql`` when it is one of this module's statements, else None;
        ``backend`` is the BE's advertised host and HTTP port."""
        cursor = TokenCursor(tokenize(sql))
        if cursor.accept_words("CREATE", "USER"):
            return self._create_user(cursor, session)
        if cursor.accept_words("DROP", "USER"):
            return self._drop_user(cursor, session)
        verb = cursor.accept_one_of("GRANT", "REVOKE")
        if verb is not None:
            return self._grant_or_revoke(cursor, session, revoke=verb == "REVOKE")
        administrative = cursor.accept_word("ADMIN")
        if administrative and cursor.accept_word("SET"):
            return self._admin_set_config(cursor, session)
        if not cursor.accept_word("SHOW"):
            return None
        return self._show(cursor, session, backend)

    def _show(self, cursor: TokenCursor, session: Session, backend: tuple[str, int]) -> StatementResult | None:
        everyone = cursor.accept_word("ALL")
        if cursor.accept_word("GRANTS"):
            return self._show_grants(cursor, session, everyone)
        if cursor.accept_word("BACKENDS"):
            cursor.expect_end()
            if not (session.holds("Admin_priv") or session.holds("Node_priv")):
                raise _access_denied("ADMIN/OPERATOR")
            return _backends_result(*backend)
        node = cursor.accept_one_of("FRONTEND", "BACKEND")
        if node is None or not cursor.accept_word("CONFIG"):
            return None
        pattern = cursor.next().value if cursor.accept_word("LIKE") else None
        cursor.expect_end()
        if not session.holds("Admin_priv"):
            raise _access_denied("ADMIN")
        with self._lock:
            configs = sorted((self._fe if node == "FRONTEND" else self._be).items())
        matching = [(key, value, kind) for key, (value, kind) in configs if _like(pattern, key)]
        if node == "FRONTEND":
            rows = tuple((key, value, kind, "true", "false", "") for key, value, kind in matching)
            return StatementResult("result_set", FE_CONFIG_TITLES, ("VARCHAR",) * 6, rows)
        rows = tuple((str(STANDIN_BACKEND_ID), "127.0.0.1", key, value, kind, "true") for key, value, kind in matching)
        return StatementResult("result_set", BE_CONFIG_TITLES, ("VARCHAR",) * 6, rows)

    def _create_user(self, cursor: TokenCursor, session: Session) -> StatementResult:
        """``CREATE USER [IF NOT EXISTS] 'u'@'h' [IDENTIFIED BY 'pw'] [COMMENT 'c']``
        (``Auth.createUserInternal``); it needs GRANT, globally."""
        if_not_exists = cursor.accept_words("IF", "NOT", "EXISTS")
        name, host = _user_identity(cursor)
        password = ""
        if cursor.accept_words("IDENTIFIED", "BY"):
            if cursor.accept_word("PASSWORD"):
                raise DorisSqlError("IDENTIFIED BY PASSWORD (a hashed password) is not emulated by the Doris stand-in")
            password = cursor.next().value
        if cursor.accept_word("COMMENT"):
            cursor.next()
        cursor.expect_end()
        _require_grant_privilege(session)
        with self._lock:
            if name in self._users:
                if if_not_exists:
                    return EXEC_OK
                raise DorisSqlError(f"User {_identity(name, self._users[name].host)} already exist")
            self._users[name] = _Account(password, host)
        return EXEC_OK

    def _drop_user(self, cursor: TokenCursor, session: Session) -> StatementResult:
        """``DROP USER [IF EXISTS] 'u'@'h'`` (``DropUserStmt``, ``Auth.dropUserInternal``)."""
        if_exists = cursor.accept_words("IF", "EXISTS")
        name, host = _user_identity(cursor)
        cursor.expect_end()
        if name == "root":
            raise DorisSqlError("Can not drop root user")
        _require_grant_privilege(session)
        with self._lock:
            if name not in self._users:
                if if_exists:
                    return EXEC_OK
                raise DorisSqlError(f"User `{name}`@`{host}` does not exist.")
            del self._users[name]
        return EXEC_OK

    def _grant_or_revoke(self, cursor: TokenCursor, session: Session, revoke: bool) -> StatementResult:
        """``GRANT privs ON pattern TO user`` / ``REVOKE privs ON pattern FROM user``."""
        privileges = _privilege_list(cursor)
        cursor.expect_word("ON")
        db, table = _table_pattern(cursor)
        cursor.expect_word("FROM" if revoke else "TO")
        name, host = _user_identity(cursor)
        cursor.expect_end()
        level = _level(db, table)
        _check_grantor(session, privileges, db, table)
        with self._lock:
            account = self._users.get(name)
            if revoke:
                self._revoke(account, level, privileges)
            elif account is None:
                raise DorisSqlError(f"user {_identity(name, host)} does not exist")
            else:
                account.grants.setdefault(level, set()).update(privileges)
        return EXEC_OK

    def _revoke(self, account: _Account | None, level: str, privileges: set[str]) -> None:
        held = set() if account is None else account.grants.get(level, set())
        if account is None or not held & privileges:
            # ErrorCode.ERR_NONEXISTING_GRANT raised without its arguments (PrivTable.revoke):
            # formatErrorMsg gives the template back as it is.
            raise DorisSqlError("There is no such grant defined for user '%s' on host '%s'", 1141)
        held -= privileges
        if not held:
            del account.grants[level]

    def _show_grants(self, cursor: TokenCursor, session: Session, everyone: bool) -> StatementResult:
        """``SHOW GRANTS``: the user's own; ``SHOW GRANTS FOR u`` of another user and
        ``SHOW ALL GRANTS`` need GRANT (``ShowGrantsStmt``)."""
        name, host = _user_identity(cursor) if cursor.accept_word("FOR") else (session.user, "%")
        cursor.expect_end()
        if everyone or name != session.user:
            _require_grant_privilege(session)
        with self._lock:
            if name not in self._users:
                raise DorisSqlError(f"User: {_identity(name, host)} does not exist")
            names = sorted(self._users) if everyone else [name]
            rows = tuple(_grants_row(user, self._users[user]) for user in names)
        return StatementResult("result_set", GRANTS_TITLES, ("VARCHAR",) * len(GRANTS_TITLES), rows)

    def _admin_set_config(self, cursor: TokenCursor, session: Session) -> StatementResult:
        """``ADMIN SET [ALL] FRONTEND CONFIG ("key" = "value")``: ADMIN only
        (``AdminSetConfigStmt``); one config per statement; values of the modelled configs must
        parse as their type (``ConfigBase.setMutableConfig``)."""
        cursor.accept_word("ALL")
        cursor.expect_word("FRONTEND", "FRONTENDS")
        cursor.expect_word("CONFIG")
        configs = parse_properties(cursor)
        cursor.expect_end()
        if not session.holds("Admin_priv"):
            raise _access_denied("ADMIN")
        if len(configs) != 1:
            raise DorisSqlError("config parameter size is not equal to 1")
        [(key, value)] = configs.items()
        with self._lock:
            kind = self._fe.get(key, ("", "String"))[1]
        if kind in ("int", "long") and not re.fullmatch(r"[-+]?\d+", value):
            raise DorisSqlError(f"Failed to set config '{key}'. err: For input string: \"{value}\"")
        self.set_fe_config(key, value)
        return EXEC_OK


def _access_denied(privileges: str) -> DorisSqlError:
    """``ErrorCode.ERR_SPECIFIC_ACCESS_DENIED_ERROR`` (1227) with the privileges the statement names."""
    return DorisSqlError(f"Access denied; you need (at least one of) the ({privileges}) privilege(s) for this operation",
                         1227)


def _require_grant_privilege(session: Session) -> None:
    # PrivPredicate.GRANT: Grant_priv or Admin_priv, globally (CreateUserStmt, DropUserStmt, ShowGrantsStmt).
    if not session.holds("Grant_priv"):
        raise _access_denied("GRANT")


def _check_grantor(session: Session, privileges: set[str], db: str, table: str) -> None:
    """``GrantStmt.checkTablePrivileges``: ADMIN/NODE only on ``*.*``, NODE only from a NODE
    holder, and a grantor without Admin_priv holds Grant_priv and every privilege granted at
    that level (``ERR_SPECIFIC_ALL_ACCESS_DENIED_ERROR``, 1223; the list in ``Privilege`` order,
    after the template's double space)."""
    if db != "*" and privileges & _GLOBAL_ONLY:
        raise DorisSqlError("ADMIN_PRIV and NODE_PRIV can only be granted/revoke on/from *.*.*")
    if "Node_priv" in privileges and not session.holds("Node_priv"):
        raise DorisSqlError("Only user with NODE_PRIV can grant/revoke NODE_PRIV to other user")
    needed = privileges | {"Grant_priv"}
    scope = ("", "") if db == "*" else (db, "" if table == "*" else table)
    if not session.holds("Admin_priv") and not all(session.holds(p, *scope) for p in needed):
        listed = ", ".join(p for p in PRIVILEGES if p in needed)
        raise DorisSqlError(f"Access denied; you need all  [{listed}] privilege(s) for this operation", 1223)


def _canonical_privilege(name: str) -> str:
    """``LOAD_PRIV`` / ``load_priv`` / ``Load_priv`` as Doris prints it (``Load_priv``)."""
    lowered = name.lower()
    canonical = next((p for p in PRIVILEGES if p.lower() == lowered), None)
    if canonical is None:
        raise DorisSqlError(f"Unknown privilege type {name}", 1064)
    return canonical


def _privilege_list(cursor: TokenCursor) -> set[str]:
    """``LOAD_PRIV, SELECT_PRIV`` or ``ALL [PRIVILEGES]`` (the manual's five table privileges)."""
    privileges: set[str] = set()
    while True:
        word = cursor.identifier()
        if word.upper() in ("ALL", "READ_WRITE"):
            cursor.accept_word("PRIVILEGES")
            privileges.update(_ALL_PRIVILEGES)
        elif word.upper() == "READ_ONLY":
            privileges.add("Select_priv")
        else:
            privileges.add(_canonical_privilege(word))
        if not cursor.accept_op(","):
            return privileges


def _table_pattern(cursor: TokenCursor) -> tuple[str, str]:
    """``*.*``, ``db.*``, ``db.tbl``, or those after the catalog (``internal.db.tbl``, ``*.*.*``)."""
    parts = [_pattern_part(cursor)]
    while cursor.accept_op("."):
        parts.append(_pattern_part(cursor))
    if len(parts) == 3 and parts[0] in ("internal", "*"):
        parts = parts[1:]
    if len(parts) != 2 or (parts[0] == "*" and parts[1] != "*"):
        raise DorisSqlError(f"Syntax error: bad privilege level '{'.'.join(parts)}'", 1064)
    return parts[0], parts[1]


def _pattern_part(cursor: TokenCursor) -> str:
    return "*" if cursor.accept_op("*") else cursor.identifier()


def _level(db: str, table: str) -> str:
    """The key of a privilege level in a user's grants: ``*``, ``db`` or ``db.table``."""
    if db == "*":
        return "*"
    return db if table == "*" else f"{db}.{table}"


def _user_identity(cursor: TokenCursor) -> tuple[str, str]:
    """``'name'@'host'`` (also unquoted or without a host, which means ``%``)."""
    name = _name_token(cursor.next())
    host = _name_token(cursor.next()) if cursor.accept_op("@") else "%"
    return name, host


def _name_token(token: Token) -> str:
    if token.kind not in ("word", "quoted", "string"):
        raise DorisSqlError(f"Syntax error: expected a user name but found '{token.text}'", 1064)
    return token.value


def _identity(name: str, host: str) -> str:
    """``UserIdentity.toString``."""
    return f"'{name}'@'{host}'"


def _grants_row(name: str, account: _Account) -> tuple[str | None, ...]:
    """One ``SHOW GRANTS`` row: privileges by level, names with the catalog (``internal.``)."""
    grants = {level: ",".join(p for p in PRIVILEGES if p in privileges) for level, privileges in account.grants.items()}
    databases = "; ".join(f"internal.{level}: {p}" for level, p in grants.items() if "." not in level and level != "*")
    tables = "; ".join(f"internal.{level}: {p}" for level, p in grants.items() if level.count(".") == 1)
    return (_identity(name, account.host), "", "Yes" if account.password else "No", "", grants.get("*") or None, None,
            databases or None, tables or None, None, None, None, None, None, None, None)  # fmt: skip


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
