"""The durable worker (DurableWorker=true) when Lambda loses an invocation mid-turn: its process
SIGKILLed while the turn's chat call hangs, as an execution environment dies (the in-process
runner's timeout cannot do this: it leaves the handler's thread running).

Each invocation is a fresh process running handler.py's ``durable_worker`` (testkit.lambda_endpoint,
an Invoke endpoint for the testing SDK's web runner, the checkpoint service), against moto's
server and a TrainGate stand-in; the API function runs in this process. The runner invokes the
execution again after the killed invocation, which replays the turns the record holds and asks
the cut turn again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from rollout_sdk.dispatch.aws_lambda import execution_name
from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import function_environment, invoke, load_event
from rollout_sdk.testing.standin import ACK_LOST, LOOPBACK_TRAINGATE, OK, Fault, TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.durable import SimClock, TurnModel
from testkit.lambda_endpoint import DurableLambda
from testkit.wait import wait_until

from .conftest import CALLBACK_KEY, ROOT
from .test_durable_worker import DURABLE

pytestmark = pytest.mark.timeout(120)

TURNS = 6
#: The turn whose chat call hangs, and whose invocation is killed meanwhile.
CUT_TURN = 3
#: The messages of events/init.json's request (the prompt every conversation starts from).
PROMPT = len(json.loads(load_event(ROOT / "events" / "init.json")["body"])["messages"])
#: Each invocation's bound (the runner's, and the endpoint's on its process).
INVOCATION_SECONDS = 60


def _turn(body: dict[str, Any]) -> int:
    """The turn a chat call asks for, counted from its conversation (TurnModel's count)."""
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant") + 1


def _ended(output: str) -> list[dict[str, Any]]:
    """The durable worker's "durable rollout ended" lines in an invocation's output (its
    Powertools JSON lines), each with how many steps it replayed and did."""
    lines = (json.loads(line) for line in output.splitlines() if line.startswith("{"))
    return [line for line in lines if line.get("message") == "durable rollout ended"]


@dataclass
class HangTurn:
    """TrainGate's model: TurnModel's answers, and as it answers the rollout's turn before
    ``turn``, a hang queued for that rollout's next chat call (so it meets the call of
    ``turn`` and no other: that call is made only once this answer arrived). The hang lasts
    until ``traingate.release()``, then the call is answered as any other."""

    traingate: TrainGateStandIn
    model: TurnModel
    rollout_id: str
    turn: int
    fault: Fault | None = None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = self.model.reply(body)
        if self.fault is None and _turn(body) == self.turn - 1:
            self.fault = Fault(status=200, delay=INVOCATION_SECONDS, rollout_id=self.rollout_id)
            self.traingate.inject("chat", self.fault)
        return answer

    def hanging(self) -> bool:
        """Whether the call of ``turn`` took the hang (the stand-in counts a fault down as a
        call takes it), and is still unanswered: the rollout's one call in flight. (A call in
        flight alone says nothing: every call is, for a moment.)"""
        taken = self.fault is not None and self.fault.count == 0
        return taken and self.traingate.pending("chat", self.rollout_id) == 1


@pytest.fixture
def worker_env(resources: LocalResources, template: dict[str, Any]) -> dict[str, str]:
    """The durable worker function's environment as deployed (DurableWorker=true), pointed at
    moto's server, with the long agent; its entry point named as Lambda names it."""
    parameters = {**LOOPBACK_TRAINGATE, "DurableWorker": "true"}
    env = function_environment(template, "DurableWorkerFunction", resources, parameters)
    return {**env, **DURABLE, "_HANDLER": "handler.durable_worker"}


@pytest.fixture
def traingate() -> Iterator[tuple[TrainGateStandIn, str]]:
    traingate = TrainGateStandIn(callback_key=CALLBACK_KEY, model=TurnModel(SimClock()))
    traingate.keep_chat_bodies = True
    with ServerThread(traingate.app) as server:
        try:
            yield traingate, server.url
        finally:
            traingate.release()  # no call left hanging when the server stops


def _init(handler: Any, server_url: str, rollout_id: str) -> dict[str, Any]:
    """Init through the API function (in this process); the durable execution's input it
    handed off (the job, its callback key sealed)."""
    event = load_event(ROOT / "events" / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=server_url, rollout_id=rollout_id, metadata={"turns": TURNS})
    event["body"] = json.dumps(body)
    accepted = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert accepted.result["statusCode"] == 202, accepted.result
    (handed_off,) = accepted.dispatched
    assert "api_key" not in handed_off
    return dict(handed_off)


@pytest.mark.parametrize("handler", [DURABLE], indirect=True)
def test_a_worker_killed_mid_turn_replays_to_one_report(
    handler: Any, worker_env: dict[str, str], traingate: tuple[TrainGateStandIn, str]
) -> None:
    rollout_id = "killed-1"
    gate, url = traingate
    model = gate.model
    assert isinstance(model, TurnModel)
    hang = HangTurn(gate, model, rollout_id, CUT_TURN)
    gate.model = hang
    handed_off = _init(handler, url, rollout_id)

    with ExitStack() as stack:
        durable = stack.enter_context(
            DurableLambda(worker_env, invocation_timeout_seconds=INVOCATION_SECONDS)
        )
        stack.callback(gate.release)  # before the invocations are killed, on any way out
        endpoint, runner = durable.endpoint, durable.runner
        arn = runner.start_execution(execution_name(rollout_id), handed_off)

        # The first invocation reaches the cut turn: its chat call hangs at TrainGate.
        wait_until(
            hang.hanging,
            within=INVOCATION_SECONDS,
            what=f"turn {CUT_TURN}'s chat call hanging",
        )
        (cut,) = endpoint.running()
        cut.kill()  # mid-turn: the turn's step started, never finished
        gate.release()  # the cut call is answered now, to a caller that is gone

        def finished() -> bool:
            return bool(runner.execution(arn)["Status"] != "RUNNING")

        wait_until(finished, within=INVOCATION_SECONDS, what="the execution's end", every=0.1)
        execution = runner.execution(arn)
        wait_until(lambda: gate.pending_total() == 0, what="TrainGate's calls all answered")
        history = runner.history(arn)
        invocations = endpoint.invocations

    assert execution["Status"] == "SUCCEEDED", execution.get("Error")
    assert json.loads(execution["Result"])["state"] == "DELIVERED"

    # The runner invoked the execution again after the killed invocation, which ran no more.
    assert len(invocations) >= 2
    assert [i.number for i in invocations if i.killed] == [cut.number] == [0]
    assert cut.returncode == -9 and cut.result is None
    assert invocations[-1].result["Status"] == "SUCCEEDED"
    # The last replayed the turns the killed one finished, from the record, and made the rest.
    assert _ended(invocations[0].output) == []
    (last,) = _ended(invocations[-1].output)
    assert (last["replayed"], last["done_now"]) == (CUT_TURN - 1, TURNS - CUT_TURN + 1)
    # The execution's record: the claim and each turn's step, each succeeded once.
    succeeded = Counter(e.get("Name") for e in history if e.get("EventType") == "StepSucceeded")
    assert succeeded == Counter({"claim": 1, "chat": TURNS})

    # One report, of the whole conversation.
    (report,) = gate.completions[rollout_id]
    assert report["status"] == "COMPLETED" and report["reward"] == 1.0
    final = report["final_messages"]
    assert len(final) == PROMPT + 2 * TURNS
    replies = [m["content"] for m in final if m["role"] == "assistant"]
    assert replies == [f"turn {n}" for n in range(1, TURNS + 1)]
    assert report["metrics"]["num_llm_calls"] == TURNS

    # Each turn asked TrainGate once, but the cut turn: the killed invocation's call (answered
    # to nobody), then the next invocation's, after it replayed the turns before from the record.
    calls = [c for c in gate.calls_for("chat", rollout_id) if c.handled and c.body is not None]
    asked = Counter(_turn(c.body) for c in calls if c.body is not None)
    assert asked == Counter({**dict.fromkeys(range(1, TURNS + 1), 1), CUT_TURN: 2})
    assert [_turn(c.body) for c in calls if c.body is not None] == [
        *range(1, CUT_TURN + 1),
        *range(CUT_TURN, TURNS + 1),
    ]
    assert [c.outcome for c in calls if c.body is not None and _turn(c.body) == CUT_TURN] == [
        ACK_LOST,
        OK,
    ]
    assert model.calls == TURNS + 1
