"""Fault injection for your own tests and our proof: wrap a real dependency and fail a chosen
method on its Nth call (KCL's ``ExceptionThrowingLeaseRefresher`` idea).

Nothing here mocks the pipeline: the wrappers sit around the real boto3 clients and the real
checkpoint store, and :func:`runner_with` runs the real loader in this process, like
``core.load.run_here``, with the load's clients passed through a wrapping function.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.load_job import LoadJob
from airflow_provider_kinesis_doris.core.settings import Credentials
from airflow_provider_kinesis_doris.core.load import LoadClients, load_ranges
from airflow_provider_kinesis_doris.core.report import RangeReport


class InjectedCrash(Exception):
    """The process "died" at this call: raised by a wrapped dependency at the chosen call."""


ErrorFactory = Callable[[str, int], BaseException]
"""Builds the error a wrapper raises, from the method name and the call number."""


def crash(method: str, call: int) -> InjectedCrash:
    """An :class:`InjectedCrash` naming the call it replaced."""
    return InjectedCrash(f"injected crash at call {call} of {method}")


def client_error(code: str) -> ErrorFactory:
    """A factory of botocore ``ClientError`` with ``code``, as an AWS service answers it.

    :param code: the AWS error code, e.g. ``ProvisionedThroughputExceededException``.
    """

    def build(method: str, call: int) -> ClientError:
        response = {"Error": {"Code": code, "Message": f"injected {code} at call {call}"},
                    "ResponseMetadata": {"HTTPStatusCode": 400}}  # fmt: skip
        return ClientError(response, method)  # type: ignore[arg-type]

    return build


class FailOnNthCall:
    """A proxy of ``target`` whose method ``method`` raises on calls ``nth`` .. ``nth + times - 1``.

    Every other attribute is the target's own. Thread-safe: calls are numbered under a lock, so
    concurrent runs sharing a wrapper fail exactly ``times`` calls in total.

    A checkpoint store's methods are those of its parts: name one as ``"part.method"`` (e.g.
    ``"chunks.record_chunk_outcome"``) and the proxy hands out a proxy of that part, so the fault
    strikes where the caller uses the part (``store.chunks.record_chunk_outcome(...)``).

    :param target: the real object (a boto3 client, a checkpoint store, ...).
    :param method: the method to fail, or several whose calls are numbered together.
    :param nth: the first failing call, from 1.
    :param error: builds the error to raise (default: :func:`crash`).
    :param times: consecutive calls that fail.
    :param before: called instead of failing, then the real method runs (to interleave a
        concurrent writer at exactly that call); ``error`` is then not used.
    :param applied: the failing calls reach the target first and raise after it answered: their
        effect stays and their answer is lost (a process killed while its write was on the wire).
    """

    def __init__(self, target: Any, method: str | tuple[str, ...], nth: int, error: ErrorFactory = crash, *,
                 times: int = 1, before: Callable[[], None] | None = None, applied: bool = False) -> None:  # fmt: skip
        if nth < 1 or times < 1:
            raise ValueError(f"nth and times must be positive, got nth={nth} times={times}")
        self._target = target
        self._methods = (method,) if isinstance(method, str) else method
        for path in self._methods:
            # A name the target lacks would never be called, and the fault would never strike:
            # say so now (a store's methods are its parts', "chunks.record_chunk_outcome").
            _attribute_at(target, path)
        self._applied = applied
        self._first, self._last = nth, nth + times - 1
        self._error = error
        self._before = before
        self._lock = threading.Lock()
        self.calls = 0
        self.fired = 0

    def __repr__(self) -> str:
        return f"FailOnNthCall({'/'.join(self._methods)} #{self._first}..{self._last} of {type(self._target).__name__})"

    def __getattr__(self, name: str) -> Any:
        return self._reach(self._target, name, name)

    def _reach(self, owner: Any, name: str, path: str) -> Any:
        """``owner``'s attribute ``name`` (``path`` from the target): failing if it is a chosen
        method, a proxy if a chosen method lies within it, else itself."""
        attribute = getattr(owner, name)
        if path in self._methods:
            return self._failing(name, attribute)
        if any(method.startswith(f"{path}.") for method in self._methods):
            return _Within(self, attribute, path)
        return attribute

    def _failing(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls += 1
                number = self.calls
                fires = self._first <= number <= self._last
                self.fired += fires
            if fires and self._before is not None:
                self._before()
            elif fires and not self._applied:
                raise self._error(name, number)
            answer = method(*args, **kwargs)
            if fires and self._before is None:
                raise self._error(name, number)
            return answer

        return call


def _attribute_at(target: Any, path: str) -> Any:
    """``target``'s attribute at the dotted ``path``.

    :raises AttributeError: naming the path, when the target has no such attribute."""
    found = target
    for name in path.split("."):
        if not hasattr(found, name):
            raise AttributeError(f"{type(target).__name__} has no {path!r} to fail")
        found = getattr(found, name)
    return found


class _Within:
    """A part of a :class:`FailOnNthCall`'s target (a store's ``chunks``): its chosen methods fail,
    counted with the wrapper's own."""

    def __init__(self, wrapper: FailOnNthCall, target: Any, path: str) -> None:
        self._wrapper = wrapper
        self._target = target
        self._path = path

    def __getattr__(self, name: str) -> Any:
        return self._wrapper._reach(self._target, name, f"{self._path}.{name}")


ClientsWrap = Callable[[LoadClients], LoadClients]


def runner_with(wrap: ClientsWrap) -> Callable[[LoadJob, Credentials], list[RangeReport]]:
    """``run_here`` in one lane (the groups one after the other, so a fault's call count means the
    same in every run), with the load's clients passed through ``wrap`` (fresh clients per group).

    :param wrap: returns the clients to use, e.g. with a :class:`FailOnNthCall` store.
    """

    def run(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        reports: list[RangeReport] = []
        for group in job.partition_groups():
            clients = wrap(LoadClients.from_job(job, credentials))
            try:
                reports.extend(load_ranges(clients, group))
            finally:
                clients.doris.close()
        return reports

    return run


def with_clients(kinesis: Any = None, store: Any = None) -> ClientsWrap:
    """An :data:`ClientsWrap` that swaps in the given Kinesis client and/or store."""

    def wrap(clients: LoadClients) -> LoadClients:
        changes = {name: value for name, value in (("kinesis", kinesis), ("store", store)) if value is not None}
        return dataclasses.replace(clients, **changes)

    return wrap


# --- counting ----------------------------------------------------------------------------------
