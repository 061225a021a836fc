"""Fault injection for the exactly-once proof: wrap a real dependency, fail a chosen method on its
Nth call (KCL's ``ExceptionThrowingLeaseRefresher`` idea), and count what a run lost or duplicated.

Nothing here mocks the pipeline: the wrappers sit around the real boto3 clients and the real
checkpoint store, and :func:`runner_with` runs the real loader in this process, like
``core.pipeline.run_here``, with the load's clients passed through a wrapping function.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from airflow_provider_kinesis_doris.core.load_job import Credentials, LoadJob
from airflow_provider_kinesis_doris.core.load import LoadClients, RangeReport, load_range


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

    :param target: the real object (a boto3 client, a checkpoint store, ...).
    :param method: the method to fail.
    :param nth: the first failing call, from 1.
    :param error: builds the error to raise (default: :func:`crash`).
    :param times: consecutive calls that fail.
    :param before: called instead of failing, then the real method runs (to interleave a
        concurrent writer at exactly that call); ``error`` is then not used.
    """

    def __init__(self, target: Any, method: str, nth: int, error: ErrorFactory = crash, *, times: int = 1,
                 before: Callable[[], None] | None = None) -> None:  # fmt: skip
        if nth < 1 or times < 1:
            raise ValueError(f"nth and times must be positive, got nth={nth} times={times}")
        self._target = target
        self._method = method
        self._first, self._last = nth, nth + times - 1
        self._error = error
        self._before = before
        self._lock = threading.Lock()
        self.calls = 0
        self.fired = 0

    def __repr__(self) -> str:
        return f"FailOnNthCall({self._method} #{self._first}..{self._last} of {type(self._target).__name__})"

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if name != self._method:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls += 1
                number = self.calls
                fires = self._first <= number <= self._last
                self.fired += fires
            if fires and self._before is not None:
                self._before()
            elif fires:
                raise self._error(name, number)
            return attribute(*args, **kwargs)

        return call


ClientsWrap = Callable[[LoadClients], LoadClients]


def runner_with(wrap: ClientsWrap) -> Callable[[LoadJob, Credentials], list[RangeReport]]:
    """``run_here`` with the load's clients passed through ``wrap`` (fresh clients per range group).

    :param wrap: returns the clients to use, e.g. with a :class:`FailOnNthCall` store.
    """

    def run(job: LoadJob, credentials: Credentials) -> list[RangeReport]:
        reports: list[RangeReport] = []
        for group in job.partition_groups():
            clients = wrap(LoadClients.from_job(job, credentials))
            try:
                reports.extend(load_range(clients, job.ranges[index]) for index in group)
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


@dataclass(frozen=True)
class Delivery:
    """What one trial delivered, compared with what it produced.

    :param lost: produced ids found neither in the table nor in the dead letter.
    :param duplicated: extra copies beyond one per id (rows, dead letters and re-applied rows).
    """

    produced: int
    lost: tuple[int, ...]
    duplicated: int

    @classmethod
    def compare(cls, produced: Collection[int], delivered: Iterable[int], reapplied: int = 0) -> Delivery:
        """Compare ids.

        :param produced: the id of every record produced (distinct).
        :param delivered: the ids found in the table and the dead letter, one per copy.
        :param reapplied: further applications the table's rows cannot show (UNIQUE KEY upserts).
        """
        copies = Counter(delivered)
        lost = tuple(sorted(set(produced) - set(copies)))
        extra = sum(count - 1 for count in copies.values() if count > 1)
        return cls(produced=len(produced), lost=lost, duplicated=extra + reapplied)


@dataclass
class ProofTally:
    """Totals over all trials; written as the proof report."""

    trials: int = 0
    records_produced: int = 0
    records_lost: int = 0
    records_duplicated: int = 0
    unresolvable_chunks: int = 0
    faults_planned: Counter[str] = field(default_factory=Counter)
    faults_fired: Counter[str] = field(default_factory=Counter)
    failed_runs: Counter[str] = field(default_factory=Counter)
    matrix: Counter[str] = field(default_factory=Counter)
    bad_trials: list[str] = field(default_factory=list)

    def add(self, trial: str, fault: str, fired: int, delivery: Delivery, *, unresolvable: int = 0,
            failures: Sequence[str] = (), cell: str = "") -> None:  # fmt: skip
        """Count one trial.

        :param trial: the trial's description (seed and matrix cell), kept if it lost or duplicated.
        :param fault: the fault kind planned.
        :param fired: how many times the fault actually struck.
        :param delivery: what the trial delivered.
        :param unresolvable: chunks reported as ``UnresolvableLoad``.
        :param failures: the error types of the runs that failed (before recovery).
        :param cell: the matrix cell, e.g. ``UNIQUE/kpl/split/concurrent``.
        """
        self.trials += 1
        self.records_produced += delivery.produced
        self.records_lost += len(delivery.lost)
        self.records_duplicated += delivery.duplicated
        self.unresolvable_chunks += unresolvable
        self.faults_planned[fault] += 1
        self.faults_fired[fault] += fired
        self.failed_runs.update(failures)
        if cell:
            self.matrix[cell] += 1
        if delivery.lost or delivery.duplicated:
            self.bad_trials.append(f"{trial}: lost {list(delivery.lost)}, duplicated {delivery.duplicated}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "trials": self.trials,
            "records_produced": self.records_produced,
            "records_lost": self.records_lost,
            "records_duplicated": self.records_duplicated,
            "unresolvable_chunks_reported": self.unresolvable_chunks,
            "faults_planned": dict(sorted(self.faults_planned.items())),
            "faults_fired": dict(sorted(self.faults_fired.items())),
            "failed_runs_by_error": dict(sorted(self.failed_runs.items())),
            "matrix_cells": dict(sorted(self.matrix.items())),
            "bad_trials": list(self.bad_trials),
        }

    def render(self) -> str:
        """A few lines for the terminal."""
        lines = [
            f"proof: {self.trials} trials, {self.records_produced} records produced, "
            f"{self.records_lost} lost, {self.records_duplicated} duplicated, "
            f"{self.unresolvable_chunks} unresolvable chunks reported",
            "  faults (planned/fired): " + ", ".join(
                f"{kind} {count}/{self.faults_fired[kind]}" for kind, count in sorted(self.faults_planned.items())
            ),
            "  failed runs before recovery: " + ", ".join(f"{k} {v}" for k, v in sorted(self.failed_runs.items())),
        ]
        lines += [f"  BAD {entry}" for entry in self.bad_trials]
        return "\n".join(lines)

    def write(self, path: str) -> None:
        with open(path, "w") as handle:
            json.dump(self.as_dict(), handle, indent=2, sort_keys=True)
            handle.write("\n")

