"""``InProcessRunner(processes=N)``: the job's range groups loaded by N processes of the task's own.

A Python process's threads share one core (the GIL). At hundreds of shards the loads' AWS calls
and Stream Loads are about two thirds of a recurring interval's CPU on the driver
(docs/benchmarks.md, "4,000 shards by simulation"), so the lanes of one process wait for its core,
not for AWS. Here the groups are shared among child processes, each loading its share in lanes
as :func:`~airflow_provider_kinesis_doris.core.load.run_here` does, with clients of its own: what
Spark's executors do, without Spark's start.

Exactly once holds as it does on Spark's executors. A range group's ranges load in one process, one
after the other (parents first), every chunk under its labels and the chunk log (I7). A typed
failure ends its group and comes back as that range's report, raised on the driver as its own
class once every process has ended (the other groups load meanwhile, as other Spark tasks do). A
process that dies leaves what a killed task leaves, which the next attempt resumes under the same
labels.

Before the loads, the same processes find the cuts of the interval's new ranges for the plan
(:func:`find_cuts_in_processes`, :mod:`~.plan_cuts`): reads of Kinesis only, which the plan
stores as it stores its own.

The children are forked from Python's fork server, not from the task: the task's process runs
threads, and a fork of it would copy the locks they hold. The server is started once per task
process, with this module (boto3, requests) imported, so that each run's children start in
milliseconds rather than importing again. Each child gets the job, the credentials and the task's
environment and import path through its start pipe (never a command line, a file or a log), sends its log records and its reports back
on a pipe of its own, and kills itself when the task's end of that pipe closes: a task killed
outright leaves no loader sending behind it.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from multiprocessing.connection import Connection, wait
from typing import Any

from airflow_provider_kinesis_doris.core.aws_clients import aws_client
from airflow_provider_kinesis_doris.core.errors import KinesisDorisError
from airflow_provider_kinesis_doris.core.load import Share, load_share_here, run_here
from airflow_provider_kinesis_doris.core.load_job import LoadJob, boundary_from_dict, boundary_to_dict
from airflow_provider_kinesis_doris.core.model import Boundary
from airflow_provider_kinesis_doris.core.plan_cuts import CutRequest, find_cuts
from airflow_provider_kinesis_doris.core.report import RangeReport, raise_first_failure
from airflow_provider_kinesis_doris.core.settings import AwsSettings, Credentials, PipelineConfig

log = logging.getLogger(__name__)

class LoaderProcessFailed(KinesisDorisError):
    """A loader process ended without its reports: an error that is not the pipeline's own, or the
    process was killed (out of memory, a signal). What it loaded is in the chunk log; the task's
    next attempt loads the rest under the same labels."""


def share_groups(groups: Sequence[Sequence[int]], processes: int) -> list[Share]:
    """``groups`` dealt to at most ``processes`` shares, one after the other, none empty."""
    count = max(1, min(processes, len(groups)))
    return [[list(group) for group in groups[share::count]] for share in range(count)]


def in_loader_process(number: int) -> str:
    """Where a range failed in loader process ``number``, as the task's error says it."""
    return f"in loader process {number}"


def run_in_processes(job: LoadJob, credentials: Credentials, *, processes: int, lanes: int) -> list[RangeReport]:
    """Load ``job`` in up to ``processes`` child processes of ``lanes`` lanes each, and return one
    report per range; in this process (:func:`run_here`) when one process's lanes hold every group.

    :raises KinesisDorisError: a range failed; raised as its own class once every process ended.
    :raises LoaderProcessFailed: a process ended without its reports.
    """
    groups = job.partition_groups()
    if processes <= 1 or len(groups) <= lanes:
        return run_here(job, credentials, lanes=lanes)
    shares = share_groups(groups, min(processes, -(-len(groups) // lanes)))  # no process with idle lanes
    log.info("loading %d range groups in %d processes of %d lanes", len(groups), len(shares), lanes)
    payloads = [(job.to_json(), asdict(credentials), share, lanes) for share in shares]
    answers = _in_children(_load_share_here, payloads, lambda number: _died_loading(job, shares[number]))
    reports = [RangeReport.from_json(text) for answer in answers for text in answer]
    raise_first_failure(reports)
    return reports


def find_cuts_in_processes(
    config: PipelineConfig, credentials: Credentials, requests: Sequence[CutRequest], trim_horizon_ms: int | None,
    *, processes: int, lanes: int,
) -> dict[CutRequest, Boundary]:
    """The plan's cuts found ahead (:mod:`~.plan_cuts`) in up to ``processes`` child processes of
    ``lanes`` lanes each, the shards dealt among them; none when one process's lanes hold every
    request. A cut not found is left out (the plan reads it itself)."""
    if processes <= 1 or len(requests) <= lanes:
        return {}  # the plan's own threads read as fast: nothing to find ahead
    count = min(processes, -(-len(requests) // lanes))
    shares = [requests[share::count] for share in range(count)]
    aws = json.dumps(asdict(config.aws))
    payloads = [(aws, config.stream_name, asdict(credentials), [request.to_json() for request in share], trim_horizon_ms, lanes)
                for share in shares]  # fmt: skip
    log.info("finding the cuts of %d new ranges in %d processes of %d lanes", len(requests), count, lanes)
    try:
        answers = _in_children(_find_cuts_here, payloads, lambda number: _died_finding(len(shares[number])))
    except LoaderProcessFailed as failed:
        log.warning("%s; the plan reads the cuts of the new ranges itself", failed)
        return {}
    pairs = (json.loads(text) for answer in answers for text in answer)
    return {CutRequest.from_json(asked): boundary_from_dict(cut) for asked, cut in pairs}


Work = Callable[..., list[str]]
"""What a child does with its payload (and its number), as the JSON texts it sends back."""


def _in_children(work: Work, payloads: Sequence[tuple[Any, ...]], died: Callable[[int], str]) -> list[list[str]]:
    """``work(*payload, number)`` in one child per payload; each child's answer, in order.

    :param died: what a child that ended without its answer was doing, for the error.
    :raises LoaderProcessFailed: a child failed, or ended without its answer.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    levels = _log_levels()
    children: list[tuple[Any, Connection]] = []
    try:
        for number, payload in enumerate(payloads):
            receive, send = context.Pipe()  # duplex: the child also learns from it that the task ended
            child = context.Process(
                target=_in_child, args=(send, levels, dict(os.environ), work, payload, number),
                name=f"kinesis-doris-loader-{number}", daemon=True,
            )  # fmt: skip
            child.start()
            send.close()  # the child's end: once the child is gone, reading this end meets EOF, and the other way round
            children.append((child, receive))
        return _gather(children, died)
    finally:
        for child, _ in children:
            if child.is_alive():
                child.terminate()
        for child, receive in children:
            child.join()
            receive.close()


def _gather(children: list[tuple[Any, Connection]], died: Callable[[int], str]) -> list[list[str]]:
    """The answer of every child, its log records handed to the task's log as they come. Each
    child has a pipe of its own (one writer: a child killed mid-write leaves no lock held), so the
    first child to end without its answer raises at once; the caller's ``finally`` stops the others."""
    answers: list[list[str]] = [[] for _ in children]
    waiting = {receive: (number, child) for number, (child, receive) in enumerate(children)}
    while waiting:
        for receive in wait(list(waiting)):
            number, child = waiting[receive]  # type: ignore[index]
            try:
                kind, payload = receive.recv()  # type: ignore[union-attr]
            except EOFError:
                child.join()
                raise LoaderProcessFailed(f"{child.name} (pid {child.pid}) {_how_it_ended(child)} before it reported, "
                                          f"{died(number)}") from None  # fmt: skip
            if kind == "log":
                _to_task_log(payload)
                continue
            if kind == "error":
                raise LoaderProcessFailed(f"{child.name} (pid {child.pid}) failed: {payload}")
            answers[number] = payload
            del waiting[receive]  # type: ignore[arg-type]
    return answers


def _how_it_ended(child: Any) -> str:
    code = child.exitcode
    return f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited with code {code}"


def _died_loading(job: LoadJob, share: Share) -> str:
    shards = sorted({job.ranges[index].shard_id for group in share for index in group})
    return (
        f"while loading {len(shards)} shards ({', '.join(shards[:5])}{', ...' if len(shards) > 5 else ''}). If it ran out "
        "of memory, lower the lanes or the processes, or chunk_max_bytes (each lane holds two chunks). What it loaded "
        "is recorded; a retry of the task loads the rest under the same labels"
    )


def _died_finding(count: int) -> str:
    return f"while finding the cuts of {count} new ranges for the plan"


def _log_levels() -> tuple[int, int]:
    """The levels a child logs at: this package's most verbose logger in the task, and the root's
    (other libraries); the task's loggers filter again what the children send."""
    ours = [logger for name, logger in logging.Logger.manager.loggerDict.items()
            if name.startswith(f"{PACKAGE}.") and isinstance(logger, logging.Logger)]  # fmt: skip
    return min(logger.getEffectiveLevel() for logger in [logging.getLogger(PACKAGE), *ours]), logging.getLogger().level


PACKAGE = __name__.split(".")[0]


def _to_task_log(record: logging.LogRecord) -> None:
    """Hand a child's record to this process's logger of the same name (the task's log), as far
    as that logger's level lets it through."""
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


class _ToTask(logging.handlers.QueueHandler):
    """A child's log handler: each record, formatted as the task's handlers would receive it,
    sent down the child's pipe (its lanes' threads take turns)."""

    def __init__(self, send: Connection) -> None:
        super().__init__(queue=None)  # type: ignore[arg-type]
        self.turn = threading.Lock()
        self.send = send

    def enqueue(self, record: logging.LogRecord) -> None:
        with self.turn:
            self.send.send(("log", record))


def _in_child(
    send: Connection, levels: tuple[int, int], environment: dict[str, str], work: Work, payload: tuple[Any, ...],
    number: int,
) -> None:
    """A child's life: ``work(*payload, number)``, sending back ("answer", [JSON]) or ("error",
    text), its log records as ("log", record) before them. Its environment is the task's as the
    child starts, not the fork server's from its own start, a run earlier perhaps (AWS's default
    credential chain and proxies read it); multiprocessing already sends the task's import path."""
    threading.Thread(target=_end_with_the_task, args=(send,), name="kinesis-doris-task-watch", daemon=True).start()
    os.environ.clear()
    os.environ.update(environment)
    handler = _ToTask(send)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    logging.getLogger(PACKAGE).setLevel(levels[0])
    root.setLevel(levels[1])
    try:
        message: tuple[str, Any] = ("answer", work(*payload, number))
    except BaseException as error:  # every failure goes back to the task, as text
        log.exception("loader process %d failed", number)  # the traceback, in the task's log
        message = ("error", "".join(traceback.format_exception_only(type(error), error)).strip())
    with handler.turn:
        send.send(message)
    send.close()


def _load_share_here(job_json: str, credentials: dict[str, Any], share: Share, lanes: int, number: int) -> list[str]:
    reports = load_share_here(LoadJob.from_json(job_json), share, Credentials(**credentials), lanes, in_loader_process(number))
    return [report.to_json() for report in reports]


def _find_cuts_here(
    aws_json: str, stream_name: str, credentials: dict[str, Any], requests: list[str], trim_horizon_ms: int | None,
    lanes: int, number: int,
) -> list[str]:
    """Each cut found, with the request it answers."""
    aws = AwsSettings(**json.loads(aws_json))
    kinesis = aws_client("kinesis", aws.kinesis_endpoint_url, aws, Credentials(**credentials), connections=lanes)
    found = find_cuts(kinesis, stream_name, [CutRequest.from_json(text) for text in requests], trim_horizon_ms, lanes)
    return [json.dumps([asked.to_json(), boundary_to_dict(cut)]) for asked, cut in found.items()]


def _end_with_the_task(pipe: Connection) -> None:
    """End this process at once when the task's process ends (its end of ``pipe`` closes): a task
    killed outright must leave no loader sending behind it. The task sends nothing down the pipe,
    so a read returns only at that end."""
    try:
        pipe.recv_bytes()
    except (EOFError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGKILL)
