"""Response bodies of the Doris stand-in's HTTP ports: FE's JSON envelope, BE's Stream Load reply
(:class:`LoadReply`), and how each port prints its JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


# --- response bodies -------------------------------------------------------------------------


def fe_envelope(msg: str, code: int, data: Any) -> dict[str, Any]:
    """FE ``ResponseBody``."""
    return {"msg": msg, "code": code, "data": data, "count": 0}


def fe_failed(msg: str) -> dict[str, Any]:
    """FE legacy ``RestBaseResult``."""
    return {"status": "FAILED", "msg": msg}


@dataclass
class LoadReply:
    """The BE load result, filled in as the load progresses."""

    label: str
    comment: str = ""
    two_phase_commit: bool = False
    txn_id: int = -1
    status: str = "Fail"
    message: str = "OK"
    existing_job_status: str | None = None
    total: int = 0
    loaded: int = 0
    filtered: int = 0
    unselected: int = 0
    load_bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    begin_ms: int = 0
    put_ms: int = 0
    read_ms: int = 0
    write_ms: int = 0
    commit_ms: int = 0
    error_url: str | None = None
    first_error: str | None = None

    def fail(self, message: str) -> LoadReply:
        self.status, self.message, self.loaded = "Fail", message, 0
        return self

    def body(self) -> dict[str, Any]:
        """Keys in master's order; optional keys only when set, as Doris omits them."""
        result: dict[str, Any] = {
            "TxnId": self.txn_id,
            "Label": self.label,
            "Comment": self.comment,
            "TwoPhaseCommit": "true" if self.two_phase_commit else "false",
            "Status": self.status,
        }
        if self.existing_job_status is not None:
            result["ExistingJobStatus"] = self.existing_job_status
        result.update({
            "Message": self.message,
            "NumberTotalRows": self.total,
            "NumberLoadedRows": self.loaded,
            "NumberFilteredRows": self.filtered,
            "NumberUnselectedRows": self.unselected,
            "LoadBytes": self.load_bytes,
            "LoadTimeMs": int((time.monotonic() - self.started) * 1000),
            "BeginTxnTimeMs": self.begin_ms,
            "StreamLoadPutTimeMs": self.put_ms,
            "ReadDataTimeMs": self.read_ms,
            "WriteDataTimeMs": self.write_ms,
            "ReceiveDataTimeMs": self.read_ms,
            "CommitAndPublishTimeMs": self.commit_ms,
        })
        if self.error_url is not None:
            result["ErrorURL"] = self.error_url
        if self.first_error is not None:
            result["FirstErrorMsg"] = self.first_error
        return result


def ms_since(since: float) -> int:
    return int((time.monotonic() - since) * 1000)


def pretty_body(body: Mapping[str, Any]) -> bytes:
    """BE bodies: pretty-printed with 4 spaces and a trailing newline."""
    return (json.dumps(body, indent=4) + "\n").encode("utf-8")


def compact_body(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), default=str).encode("utf-8")
