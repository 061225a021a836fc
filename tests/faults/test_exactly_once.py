"""Seeded fault injection: every trial kills or fails a real run of one interval at a step
boundary (or in Doris, Kinesis or DynamoDB), recovers by re-running it, and checks that Doris and
the dead-letter table hold every produced record exactly once.

``KD_PROOF_TRIALS`` (default 25) sets the number of trials, ``KD_PROOF_FIRST_SEED`` (default 1) the
first seed, ``KD_PROOF_REPORT`` a path for the JSON report. Seeds cycle through every fault kind.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from airflow_provider_kinesis_doris.core.errors import LabelWindowBroken
from tests.faults.tally import ProofTally
from tests.faults.trial import FAULT_KINDS, LABEL_EXPIRED, RECOVERY_RUNS, TrialSpec, record, run_trial

pytestmark = pytest.mark.integration

TRIALS = int(os.environ.get("KD_PROOF_TRIALS", "25"))
FIRST_SEED = int(os.environ.get("KD_PROOF_FIRST_SEED", "1"))
SEEDS = range(FIRST_SEED, FIRST_SEED + TRIALS)


@pytest.fixture(scope="module")
def tally() -> ProofTally:
    return ProofTally()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_faulty_run_then_recovery_loads_every_record_exactly_once(seed: int, proof_stack, tally: ProofTally) -> None:  # type: ignore[no-untyped-def]
    spec = TrialSpec.from_seed(seed)
    result = run_trial(spec, proof_stack)
    record(tally, result)

    assert result.last is not None, f"{spec}: no clean run after the fault: {[repr(e) for e in result.errors]}"
    assert result.delivery.lost == (), f"{spec}: records lost"
    assert result.delivery.duplicated == 0, f"{spec}: records duplicated"
    assert not result.last.plan.waiting


def test_the_proof_report(tally: ProofTally, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last: the totals over every trial of this module, printed and written as JSON."""
    report_path = os.environ.get("KD_PROOF_REPORT")
    if report_path:
        tally.write(report_path)
    with capsys.disabled():
        print("\n" + tally.render())

    assert tally.trials == TRIALS
    assert tally.records_lost == 0 and tally.records_duplicated == 0
    expected_kinds = {FAULT_KINDS[seed % len(FAULT_KINDS)] for seed in SEEDS}
    assert set(tally.faults_planned) == expected_kinds
    assert [kind for kind in expected_kinds if tally.faults_fired[kind] == 0] == []


def test_an_overstated_label_window_stops_the_run_before_a_forgotten_label_is_sent_again(proof_stack) -> None:  # type: ignore[no-untyped-def]
    """Told Doris keeps labels 12 h while it forgets them after 1 s, the retry of a run that died
    after Doris committed its second chunk would trust the forgotten label and load that chunk
    again: 2 duplicates before the label-window canary. Now every retry stops with LabelWindowBroken
    before it sends anything: the canary, the first chunk's label, recorded VISIBLE before the
    crash, is unknown to Doris inside the window the pipeline claims. (A crash at the pipeline's
    very first chunk has no older canary to ask: docs/doris.md, 'Label window'.)"""
    spec = replace(TrialSpec.from_seed(3), fault=LABEL_EXPIRED, nth=2, times=1, concurrent=False, reshard=None,
                   model="DUPLICATE")  # fmt: skip
    overstated = lambda config: replace(config, doris=replace(config.doris, label_keep_seconds=43200))  # noqa: E731

    result = run_trial(spec, proof_stack, configure=overstated)

    assert result.fired == 1 and result.last is None
    recovery = result.errors[-RECOVERY_RUNS:]
    assert {type(error) for error in recovery} == {LabelWindowBroken}, [repr(e) for e in recovery]
    assert "label_keep_seconds is 43200" in str(recovery[0]) and "streaming_label_keep_max_second" in str(recovery[0])
    assert result.delivery.duplicated == 0
