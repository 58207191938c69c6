"""The durable worker (DurableWorker=true, issue 25), through handler.py, moto's server and the
durable execution testing SDK's runner, which runs each execution in process against its
in-memory checkpoint service, a fresh handler call per invocation, with durable waits skipped.

Time is simulated (testkit.durable): every chat turn takes 60 s of the runtime's clock, so a
40-turn rollout is 40 minutes, and with WorkerTimeout 600 it cannot fit in one invocation.
Between invocations (while the execution is suspended) a test can act: run the re-drive, cancel,
take TrainGate down, change the agent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aws_durable_execution_sdk_python.lambda_service import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import (
    DurableFunctionTestRunner,
    StepOperation,
    WaitOperation,
)
from botocore.exceptions import ClientError

import testkit.durable
from rollout_sdk.aws.durable import SUSPENDED_LEASE_SECONDS
from rollout_sdk.aws.runtime import DURABLE_RETENTION_DAYS
from rollout_sdk.dispatch.aws_lambda import DurableLambdaDispatcher, execution_name
from rollout_sdk.dispatch.base import Job
from rollout_sdk.dispatch.sealed import SEALED_KEY_FIELD, sealed_job_from_event
from rollout_sdk.errors import ConfigurationError, StoreError
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.prices import effective_prices
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.telemetry import Metric
from rollout_sdk.testing.standin import Fault, TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.cost import docs_durable_units, docs_usd
from testkit.durable import SimClock, TurnModel, close_runner

from .conftest import CALLBACK_KEY, ROOT

pytestmark = pytest.mark.timeout(180)

DURABLE = {
    "DURABLE_WORKER": "true",
    "AGENT_LOOP": "testkit.durable:long_agent",
    "WORKER_TIMEOUT_SECONDS": "600",
    "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS": "7200",
    # A failed chat call is retried at once (the outage test), not after real seconds.
    "OSMOSIS_ROLLOUT_CLIENT_RETRY_BASE_DELAY": "0",
    "OSMOSIS_ROLLOUT_CLIENT_RETRY_MAX_DELAY": "0",
}
#: The history test's: room for 20 operations in the execution's history (Lambda's is 25,000).
SMALL_HISTORY = {**DURABLE, "DURABLE_MAX_OPERATIONS": "20"}
#: The deadline test's: 20 simulated minutes for a rollout of 40 one-minute turns.
SHORT_DEADLINE = {**DURABLE, "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS": "1200"}
TURNS = 40
#: The messages of events/init.json's request (the prompt every conversation starts from).
PROMPT = len(json.loads(load_event(ROOT / "events" / "init.json")["body"])["messages"])


@dataclass
class Rig:
    """handler.py on the durable worker, a TrainGate stand-in whose model takes simulated
    time, and the runner; ``between`` runs before each invocation after the first."""

    handler: Any
    clock: SimClock
    traingate: TrainGateStandIn
    url: str
    between: Callable[[int], None] | None = None
    invocations: int = 0
    #: The last execution's history, its input and operations' data included, as
    #: GetDurableExecutionHistory answers it.
    history: Any = field(default=None, repr=False)

    @property
    def runtime(self) -> Any:
        return self.handler.runtime

    def init(self, rollout_id: str, turns: int = TURNS, **metadata: Any) -> dict[str, Any]:
        """Init through the API function; the durable execution's input it handed off."""
        event = load_event(ROOT / "events" / "init.json")
        body = json.loads(event["body"])
        body.update(
            server_url=self.url, rollout_id=rollout_id, metadata={"turns": turns, **metadata}
        )
        event["body"] = json.dumps(body)
        accepted = invoke(self.handler, "ApiFunction", event, timeout_seconds=29)
        assert accepted.result["statusCode"] == 202, accepted.result
        (handed_off,) = accepted.dispatched
        return handed_off

    def _entry(self, event: Any, context: Any) -> Any:
        number = self.invocations
        self.invocations += 1
        if number and self.between is not None:
            self.between(number)
        return self.handler.durable_worker(event, context)

    def run(self, handed_off: dict[str, Any]) -> Any:
        """The rollout's execution to its end, in as many invocations as it takes."""
        runner = DurableFunctionTestRunner(self._entry, skip_time=True)
        try:
            arn = runner.run_async(
                input=json.dumps(handed_off),
                execution_timeout=150,
                execution_name=execution_name(handed_off["rollout_id"]),
            )
            result = runner.wait_for_result(arn, timeout=150)
            self.history = runner.get_execution_history(arn, include_execution_data=True)
            return result
        finally:
            close_runner(runner)

    def on_the_plain_worker(self, rollout_id: str, turns: int = TURNS) -> dict[str, Any]:
        """The same agent's rollout on the plain worker (one invocation): its one report."""
        self.init(rollout_id, turns=turns)
        plain = invoke(
            self.handler,
            "WorkerFunction",
            {"rollout_id": rollout_id, "attempt": 1, "api_key": CALLBACK_KEY},
            timeout_seconds=900,
        )
        assert plain.result["state"] == "DELIVERED"
        (report,) = self.reports(rollout_id)
        return report

    def record(self, rollout_id: str) -> RolloutRecord:
        record: RolloutRecord | None = self.runtime.run(
            self.runtime.store.get(rollout_id, now=self.clock())
        )
        assert record is not None
        return record

    def reports(self, rollout_id: str) -> list[dict[str, Any]]:
        return list(self.traingate.completions.get(rollout_id, []))

    def asked(self, rollout_id: str) -> list[int]:
        """The conversation length of each chat call TrainGate answered for the rollout."""
        calls = self.traingate.calls_for("chat", rollout_id)
        return [len(c.body["messages"]) for c in calls if c.handled and c.body is not None]


@pytest.fixture
def rig(handler: Any) -> Iterator[Rig]:
    clock = SimClock()
    handler.runtime.clock = clock  # before the engine is built: its clock
    traingate = TrainGateStandIn(callback_key=CALLBACK_KEY, model=TurnModel(clock))
    traingate.keep_chat_bodies = True
    testkit.durable.DIVERGE_FROM_TURN = None
    with ServerThread(traingate.app) as server:
        yield Rig(handler, clock, traingate, server.url)
    testkit.durable.DIVERGE_FROM_TURN = None


def _category(report: dict[str, Any]) -> str:
    return str(report["extra_fields"]["rollout_sdk"]["failure"]["category"])


def _suspensions(result: Any) -> int:
    return sum(1 for op in result.operations if op.name == "suspend")


# ---------------------------------------------------------------------- the long rollout


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_a_40_minute_rollout_runs_across_invocations_each_turn_asked_once(rig: Rig) -> None:
    handed_off = rig.init("long-1")
    gaps: list[tuple[str, float, int]] = []

    def between(number: int) -> None:
        # Suspended: the lease outlives the re-drive's reach, which leaves the rollout alone.
        record = rig.record("long-1")
        assert record.lease_until is not None
        left = record.lease_until - rig.clock()
        gaps.append((record.state.value, left, len(rig.reports("long-1"))))
        rig.runtime.run(rig.runtime.recovery.redrive())

    rig.between = between
    counted: list[Metric] = []
    count = rig.runtime.telemetry.count

    def counting(metric: Metric, value: float = 1, /, **dimensions: str) -> None:
        counted.append(metric)
        count(metric, value, **dimensions)

    rig.runtime.telemetry.count = counting
    result = rig.run(handed_off)

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    assert json.loads(result.result)["state"] == "DELIVERED"
    # One rollout started and finished, however many invocations it took.
    assert counted.count(Metric.ROLLOUTS_STARTED) == counted.count(Metric.ROLLOUTS_FINISHED) == 1
    assert rig.invocations >= 4
    assert _suspensions(result) == rig.invocations - 1
    assert all(state == "RUNNING" for state, _, _ in gaps)
    assert all(left > SUSPENDED_LEASE_SECONDS - 120 for _, left, _ in gaps), gaps
    assert all(reported == 0 for _, _, reported in gaps)
    # Each turn's chat call reached TrainGate once, however often its invocation was replayed.
    asked = rig.asked("long-1")
    assert len(asked) == TURNS == len(set(asked))
    assert rig.traingate.chat_count("long-1") == TURNS
    assert testkit.durable.STEPS_RUN["long-1"] == TURNS // 10  # each ctx.step ran once
    (report,) = rig.reports("long-1")
    assert report["status"] == "COMPLETED" and report["reward"] == 1.0
    assert report["metrics"]["num_llm_calls"] == TURNS
    # The cost estimate covers every invocation: the API's request and each durable
    # invocation's, each suspension having recorded its own part for the next to carry.
    cost = report["extra_fields"]["rollout_sdk"]["cost"]
    assert cost["units"]["lambda_request"] == pytest.approx(1 + rig.invocations)
    assert set(cost["lambda"]) == {"api", "durable-worker"}
    # ... and the execution's own charges, docs/cost.md's durable formula over its history
    # as the runner kept it: its operations, its input's and checkpoints' bytes, those bytes
    # kept for the 40 simulated minutes to the finish and the day of retention after.
    steps = [op for op in result.operations if isinstance(op, StepOperation)]
    run = {
        "steps": len(steps),
        "waits": sum(1 for op in result.operations if isinstance(op, WaitOperation)),
        "input_bytes": len(json.dumps(handed_off).encode()),
        "checkpoint_bytes": [len(op.result.encode()) for op in steps if op.result is not None],
        "seconds": TURNS * 60.0,
        "retention_days": DURABLE_RETENTION_DAYS,
    }
    assert (
        run["steps"] == 1 + TURNS + TURNS // 10 + rig.invocations - 1
    )  # claim, chat, ctx.step, suspend
    durable = docs_durable_units(run)
    assert durable["lambda_durable_operation"] == 1 + len(result.operations)
    assert durable["lambda_durable_written_byte"] > 40 * len("turn 40")  # the answers, at least
    for unit, expected in durable.items():
        assert cost["units"][unit] == pytest.approx(expected, rel=1e-6, abs=1e-6), unit
    assert cost["usd"] == pytest.approx(docs_usd(cost, effective_prices()), abs=1e-9)

    # The same agent on the plain worker says the same.
    assert report["final_messages"] == rig.on_the_plain_worker("plain-1")["final_messages"]
    assert len(report["final_messages"]) == PROMPT + 2 * TURNS

    # The key never sits in clear in the execution's history: input and step results.
    history = repr(rig.history)  # its first page
    assert handed_off[SEALED_KEY_FIELD] in history  # the input, with its data
    results = repr(result.operations)
    assert "turn 40" in results  # the steps' results
    assert CALLBACK_KEY not in history and CALLBACK_KEY not in results
    assert "api_key" not in handed_off


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_a_traingate_outage_across_a_suspension_loses_and_repeats_nothing(rig: Rig) -> None:
    handed_off = rig.init("outage-1")

    def between(number: int) -> None:
        if number == 1:
            # TrainGate drops the next three calls: the resumed turn is retried until it lands.
            rig.traingate.inject("chat", Fault(status=0, count=3, rollout_id="outage-1"))

    rig.between = between
    result = rig.run(handed_off)

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    calls = rig.traingate.calls_for("chat", "outage-1")
    assert sum(1 for c in calls if not c.handled) == 3
    asked = rig.asked("outage-1")
    assert len(asked) == TURNS == len(set(asked))
    (report,) = rig.reports("outage-1")
    assert report["status"] == "COMPLETED"


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_a_cancel_between_invocations_ends_the_rollout_with_what_it_did(rig: Rig) -> None:
    handed_off = rig.init("cancel-1")
    asked_before: list[int] = []

    def between(number: int) -> None:
        if number == 2:
            asked_before.append(len(rig.asked("cancel-1")))
            event = load_event(ROOT / "events" / "init.json")
            path = "/v1/rollout/cancel-1/cancel"
            event.update(rawPath=path, body="")
            event["requestContext"]["http"]["path"] = path
            asyncio.set_event_loop(rig.runtime.loop)  # the runner's thread: the API's loop
            answer = invoke(rig.handler, "ApiFunction", event, timeout_seconds=29).result
            assert answer["statusCode"] == 202, answer

    rig.between = between
    result = rig.run(handed_off)

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    assert rig.invocations == 3  # the cancel stopped the execution in the invocation it met
    (report,) = rig.reports("cancel-1")
    assert report["status"] == "ERROR" and _category(report) == "cancelled"
    # No turn after the cancel; the report carries every turn made before it.
    (turns,) = asked_before
    assert len(rig.asked("cancel-1")) == turns
    assert len(report["final_messages"]) == PROMPT + 2 * turns - 1


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_a_diverging_replay_ends_the_rollout_once_as_replay_diverged(rig: Rig) -> None:
    handed_off = rig.init("diverge-1")

    def between(number: int) -> None:
        if number == 1:
            testkit.durable.DIVERGE_FROM_TURN = 3  # the agent now asks otherwise at turn 3

    rig.between = between
    result = rig.run(handed_off)

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    assert rig.invocations == 2
    (report,) = rig.reports("diverge-1")
    assert report["status"] == "ERROR" and _category(report) == "replay_diverged"
    # Nothing of the diverging run reached TrainGate: only the first invocation's turns.
    asked = rig.asked("diverge-1")
    assert len(asked) == len(set(asked)) and len(asked) < TURNS
    assert report["reward"] is None


@pytest.mark.parametrize("handler", [SHORT_DEADLINE], indirect=True)
def test_the_deadline_spans_invocations_and_sends_the_partial_trajectory(rig: Rig) -> None:
    handed_off = rig.init("deadline-1")
    result = rig.run(handed_off)

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    assert rig.invocations >= 2
    (report,) = rig.reports("deadline-1")
    assert report["status"] == "ERROR" and _category(report) == "timeout"
    turns = len(rig.asked("deadline-1"))
    assert turns == 20  # 20 one-minute turns fit in the 20-minute deadline
    assert len(report["final_messages"]) == PROMPT + 2 * turns - 1


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_an_answer_over_the_checkpoint_limit_goes_through_the_payload_bucket(rig: Rig) -> None:
    """Lambda takes at most 256 KB per checkpoint (the testing runner does not check it): the
    300 KB answer of turn 2 is kept in the payload bucket, its checkpoint a reference, and the
    replays of later invocations read it back: the rollout ends as on the plain worker."""
    big = 300_000
    rig.traingate.model = TurnModel(rig.clock, big_turns=frozenset({2}), big_bytes=big)
    s3 = rig.runtime.clients.s3
    gets: list[str] = []
    s3.meta.events.register(
        "before-parameter-build.s3.GetObject", lambda params, **_: gets.append(params["Key"])
    )
    turns = 12
    handed_off = rig.init("big-1", turns=turns)
    result = rig.run(handed_off)

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    assert rig.invocations >= 2  # a replay after turn 2 had to read the answer back
    payloads = [op.result for op in result.operations if getattr(op, "result", None)]
    assert payloads and all(len(str(p).encode()) < 256 * 1024 for p in payloads)
    bucket = rig.runtime.aws.payload_bucket
    stored = s3.list_objects_v2(Bucket=bucket, Prefix="checkpoints/").get("Contents", [])
    assert len(stored) == 1  # the one big answer, once: replays read it, never store it again
    assert gets.count(stored[0]["Key"]) == rig.invocations - 1  # once per replaying invocation
    assert rig.traingate.chat_count("big-1") == turns  # each turn asked once
    (report,) = rig.reports("big-1")
    assert report["status"] == "COMPLETED"
    assert len(report["final_messages"][PROMPT + 2]["content"]) > big  # turn 2's answer

    plain = rig.on_the_plain_worker("big-plain", turns=turns)
    assert report["final_messages"] == plain["final_messages"]


@pytest.mark.parametrize("handler", [SMALL_HISTORY], indirect=True)
def test_a_full_history_ends_the_rollout_once_with_its_trajectory_so_far(rig: Rig) -> None:
    handed_off = rig.init("history-1")
    result = rig.run(handed_off)

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    assert rig.invocations >= 2  # the count spans invocations (replays count the same)
    # The history stayed inside its bound: every operation the execution made.
    assert 0 < len(result.operations) <= 20
    (report,) = rig.reports("history-1")
    assert report["status"] == "ERROR" and _category(report) == "history_full"
    assert "history is full" in report["error_message"]
    turns = len(rig.asked("history-1"))
    assert 0 < turns < TURNS
    assert len(rig.asked("history-1")) == len(set(rig.asked("history-1")))  # each asked once
    assert len(report["final_messages"]) == PROMPT + 2 * turns - 1
    assert report["reward"] is None
    assert rig.record("history-1").state is RecordState.DELIVERED
    # What the docs count (docs/aws.md, "Its guarantees and limits"): the claim, a step per
    # chat turn and per ctx.step (a "note" every tenth turn), two per suspension (the step it
    # stopped at and its wait), and the step that found the history full.
    suspensions = rig.invocations - 1
    assert len(result.operations) == 1 + turns + turns // 10 + 2 * suspensions + 1


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_a_failed_execution_is_reported_once_by_the_re_drive(rig: Rig) -> None:
    handed_off = rig.init("failed-1")
    vault = rig.runtime.vault
    opened = vault.open

    async def broken(*args: Any, **kwargs: Any) -> str:
        raise StoreError("KMS is unreachable")

    def between(number: int) -> None:
        if number == 1:
            vault.open = broken  # the second invocation cannot open the key: it fails

    rig.between = between
    result = rig.run(handed_off)
    vault.open = opened

    assert result.status is InvocationStatus.FAILED
    assert rig.reports("failed-1") == []
    record = rig.record("failed-1")
    assert record.state is RecordState.RUNNING and record.sealed_key is not None
    # Its lease runs out; the re-drive reports it once, with the sealed key it stored.
    rig.clock.advance(SUSPENDED_LEASE_SECONDS + 60)
    rig.runtime.run(rig.runtime.recovery.redrive())
    rig.runtime.run(rig.runtime.recovery.redrive())
    (report,) = rig.reports("failed-1")
    assert report["status"] == "ERROR" and _category(report) == "worker_lost"


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_concurrent_chat_calls_are_refused_naming_the_rule(rig: Rig) -> None:
    result = rig.run(rig.init("concurrent-1", concurrent=True))

    assert result.status is InvocationStatus.SUCCEEDED, result.error
    (report,) = rig.reports("concurrent-1")
    assert report["status"] == "ERROR" and _category(report) == "agent_error"
    assert "one at a time" in report["error_message"]
    assert len(rig.asked("concurrent-1")) == 1  # the first call alone was asked


@pytest.mark.parametrize("handler", [{**DURABLE, "CALLBACK_KEY_KMS_KEY_ID": ""}], indirect=True)
def test_the_durable_hand_off_needs_the_kms_key(handler: Any) -> None:
    with pytest.raises(ConfigurationError, match="CALLBACK_KEY_KMS_KEY_ID"):
        _ = handler.runtime.dispatcher


# ---------------------------------------------------------------------- the hand-off


def test_a_repeated_hand_off_starts_no_second_execution() -> None:
    """Lambda's rule for named executions (the same name: the existing one; another input: an
    AlreadyStarted error), played by a client stub: the dispatcher counts both as made."""
    started: dict[str, bytes] = {}

    class Lambda:
        def invoke(self, **params: Any) -> dict[str, Any]:
            name = params["DurableExecutionName"]
            if name in started and started[name] != params["Payload"]:
                raise ClientError(
                    {"Error": {"Code": "DurableExecutionAlreadyStartedException", "Message": name}},
                    "Invoke",
                )
            started.setdefault(name, params["Payload"])
            return {"StatusCode": 202}

    class Vault:
        calls = 0

        async def seal(self, key: str, *, rollout_id: str) -> str:
            Vault.calls += 1
            return f"sealed-{Vault.calls}"  # a key sealed again differs

    dispatcher = DurableLambdaDispatcher(
        "arn:aws:lambda:us-east-1:123456789012:function:durable:live",
        client=Lambda(),  # type: ignore[arg-type]
        vault=Vault(),  # type: ignore[arg-type]
    )
    job = Job("repeat/1", 1, api_key=CALLBACK_KEY)
    asyncio.run(dispatcher.dispatch(job))
    asyncio.run(dispatcher.dispatch(job))  # a duplicate init's, or the re-drive's
    assert list(started) == [execution_name("repeat/1")]
    assert dispatcher.dispatched == 2
    payload = json.loads(started[execution_name("repeat/1")])
    assert payload[SEALED_KEY_FIELD] == "sealed-1" and "api_key" not in payload


def test_execution_names_are_lambdas_and_distinct() -> None:
    assert execution_name("sample-rollout-0001") == "sample-rollout-0001"
    odd = ["a/b", "a_b" * 40, "x" * 65, "a b", "é", "r-h0123456789abcdef0123"]
    names = [execution_name(rollout_id) for rollout_id in odd]
    assert len(set(names)) == len(odd)
    for name in names:
        assert 1 <= len(name) <= 64 and all(c.isalnum() or c in "-_" for c in name)
        assert name.isascii()


def test_the_durable_input_never_carries_the_key_in_clear() -> None:
    with pytest.raises(ValueError, match="'api_key' must be absent"):
        sealed_job_from_event({"rollout_id": "r", "attempt": 1, "api_key": CALLBACK_KEY})
    queued = sealed_job_from_event({"rollout_id": "r", "attempt": 1, SEALED_KEY_FIELD: "s"})
    assert queued.sealed_api_key == "s" and queued.job.api_key is None
