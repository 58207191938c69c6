"""The queue and dead-letter handlers over a runtime whose worker is a stand-in: a batch's
rollouts run concurrently on the runtime's one loop (the loop the kit uses on Lambda), and the
partial-batch report names exactly the messages whose rollouts the kit could not settle."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest

from rollout_sdk.aws.clients import AwsClients
from rollout_sdk.aws.handlers import dead_letter, queue
from rollout_sdk.aws.runtime import LambdaRuntime
from rollout_sdk.local.invoke import LocalLambdaContext
from rollout_sdk.settings import load_settings

if TYPE_CHECKING:
    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.dispatch.sealed import QueuedJob
    from rollout_sdk.engine.settlement import Settlement
    from rollout_sdk.engine.worker import RolloutWorker

#: Long enough never to fire when the rollouts do run together; a batch run one rollout at a
#: time fails on it instead of hanging.
TOGETHER_TIMEOUT = 30.0


class StandInWorker:
    """Runs nothing; records which loop each rollout ran on, and can hold every rollout until
    ``expected`` of them have started (they then all run at once, or the wait times out)."""

    def __init__(self, *, expected: int = 0, failing: frozenset[str] = frozenset()) -> None:
        self.expected = expected
        self.failing = failing
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.deadlines: list[float | None] = []
        self.reports: list[tuple[str, str]] = []
        self._started = 0
        self._all_started: asyncio.Event | None = None

    async def run(self, job: Job, *, deadline_seconds: float | None = None) -> None:
        self.loops.append(asyncio.get_running_loop())
        self.deadlines.append(deadline_seconds)
        if self.expected:
            self._all_started = self._all_started or asyncio.Event()
            self._started += 1
            if self._started == self.expected:
                self._all_started.set()
            await asyncio.wait_for(self._all_started.wait(), TOGETHER_TIMEOUT)
        if job.rollout_id in self.failing:
            raise RuntimeError(f"store unreachable for {job.rollout_id}")
        if job.rollout_id == "cancelled":
            raise asyncio.CancelledError

    async def report_failed_job(self, job: Job, *, reason: str) -> None:
        self.reports.append((job.rollout_id, reason))

    async def open_queued(self, queued: QueuedJob, *, then: str) -> Job:
        # These messages carry no sealed key: the job is the message's (settlement's move).
        return await queued.open(None)


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaRuntime]:
    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    settings = load_settings(aws={"AGENT_LOOP": "m:a", "TABLE_NAME": "t"})
    # No client is ever built: the stand-in worker touches neither the store nor TrainGate.
    built = LambdaRuntime(
        cast("RolloutAgentLoop", object()),
        settings=settings,
        clients=AwsClients(endpoint_url="http://127.0.0.1:9"),
    )
    try:
        yield built
    finally:
        built.close()


def _use(runtime: LambdaRuntime, worker: StandInWorker) -> StandInWorker:
    # The stand-in runs rollouts (the worker's job) and reports failed jobs (settlement's).
    runtime.worker = cast("RolloutWorker", worker)
    runtime.settlement = cast("Settlement", worker)
    return worker


def _message(message_id: str, body: Any, **fields: Any) -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body)
    return {"messageId": message_id, "receiptHandle": f"rh-{message_id}", "body": text, **fields}


def _batch(*rollout_ids: str) -> dict[str, Any]:
    return {
        "Records": [
            _message(f"m-{rid}", {"rollout_id": rid, "attempt": 1, "api_key": "k"})
            for rid in rollout_ids
        ]
    }


def _context(seconds: float = 900) -> LocalLambdaContext:
    return LocalLambdaContext(function_name="QueueWorkerFunction", timeout_seconds=seconds)


def test_a_batch_runs_its_rollouts_together_on_the_runtimes_loop(
    runtime: LambdaRuntime,
) -> None:
    ids = [f"r-{i}" for i in range(5)]
    worker = _use(runtime, StandInWorker(expected=len(ids)))
    answer = queue.handle(runtime, _batch(*ids), _context())
    assert answer == {"batchItemFailures": []}
    assert len(worker.loops) == len(ids)
    assert all(loop is runtime.loop for loop in worker.loops)
    assert not runtime.loop.is_closed()  # the TrainGate client's connections outlive a batch


def test_on_lambda_the_batch_still_runs_on_the_runtimes_loop(
    runtime: LambdaRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Powertools' own async_process would take the thread's current loop here.
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    other = asyncio.new_event_loop()
    asyncio.set_event_loop(other)
    try:
        worker = _use(runtime, StandInWorker(expected=2))
        assert queue.handle(runtime, _batch("a", "b"), _context()) == {"batchItemFailures": []}
        assert queue.handle(runtime, _batch("c", "d"), _context()) == {"batchItemFailures": []}
    finally:
        asyncio.set_event_loop(runtime.loop)
        other.close()
    assert [loop is runtime.loop for loop in worker.loops] == [True] * 4


def test_the_deadline_is_the_invocations_time_left_less_the_margin(
    runtime: LambdaRuntime,
) -> None:
    worker = _use(runtime, StandInWorker())
    queue.handle(runtime, _batch("a", "b"), _context(seconds=100))
    margin = runtime.aws.deadline_margin_seconds
    assert all(d is not None and 80 < d <= 100 - margin for d in worker.deadlines)


def test_malformed_messages_are_dropped_and_unsettled_rollouts_reported(
    runtime: LambdaRuntime,
) -> None:
    worker = _use(runtime, StandInWorker(expected=3, failing=frozenset({"doomed"})))
    event = _batch("fine", "doomed", "cancelled")
    event["Records"] += [
        _message("not-json", "{not json"),
        _message("no-id", {"attempt": 1}),
        {"messageId": "no-body"},
    ]
    answer = queue.handle(runtime, event, _context())
    assert answer == {
        "batchItemFailures": [{"itemIdentifier": "m-doomed"}, {"itemIdentifier": "m-cancelled"}]
    }
    assert len(worker.loops) == 3  # the malformed messages ran nothing


def test_a_batch_that_failed_entirely_is_reported_not_raised(runtime: LambdaRuntime) -> None:
    _use(runtime, StandInWorker(failing=frozenset({"x", "y"})))
    answer = queue.handle(runtime, _batch("x", "y"), _context())
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m-x"}, {"itemIdentifier": "m-y"}]}


@pytest.mark.parametrize("event", [{}, {"Records": "nope"}, [], None, {"Records": []}])
def test_an_event_with_no_records_is_an_empty_report(runtime: LambdaRuntime, event: Any) -> None:
    worker = _use(runtime, StandInWorker())
    assert queue.handle(runtime, event, _context()) == {"batchItemFailures": []}
    assert dead_letter.handle(runtime, event, _context()) == {"status": "settled", "rollouts": []}
    assert worker.loops == []
    assert worker.reports == []


def test_dead_letters_are_reported_with_their_receive_count(runtime: LambdaRuntime) -> None:
    worker = _use(runtime, StandInWorker())
    job = {"rollout_id": "dl", "attempt": 1, "api_key": "k"}
    event = {
        "Records": [
            _message("1", job, attributes={"ApproximateReceiveCount": "3"}),
            _message("2", "{not json"),
            _message("3", {**job, "rollout_id": "bare"}),
        ]
    }
    answer = dead_letter.handle(runtime, event, _context())
    assert answer == {
        "status": "settled",
        "rollouts": [
            {"rollout_id": "dl", "state": "absent"},
            {"rollout_id": "bare", "state": "absent"},
        ],
    }
    assert worker.reports == [
        ("dl", "the queued rollout failed 3 times (dead-letter queue)"),
        ("bare", "the queued rollout failed ? times (dead-letter queue)"),
    ]
