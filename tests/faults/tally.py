"""The proof's bookkeeping: what each trial delivered against what it produced, and the totals
over all trials that ``make proof`` writes as its report."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any



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

