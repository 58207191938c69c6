"""The TrainGate stand-in's faults do what they say, over real HTTP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from rollout_sdk.testing.standin import ACK_LOST, FAILED, OK, REFUSED, Fault, TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

DONE = {"rollout_id": "r1", "status": "COMPLETED", "final_messages": []}


@pytest.fixture
def standin() -> Iterator[tuple[TrainGateStandIn, str]]:
    traingate = TrainGateStandIn()
    server = ServerThread(traingate.app, timeout_graceful_shutdown=1)
    with server:
        try:
            yield traingate, server.url
        finally:
            traingate.release()


def chat(rollout_id: str, run_id: str | None, *, turn: int = 1) -> dict[str, object]:
    messages: list[dict[str, object]] = [{"role": "user", "content": "What is 6 * 7?"}]
    if turn > 1:
        messages.append({"role": "assistant", "content": "thinking"})
    body: dict[str, object] = {"rollout_id": rollout_id, "messages": messages}
    if run_id is not None:
        body["run_id"] = run_id
    return body


def wait_idle(traingate: TrainGateStandIn, within: float = 5.0) -> None:
    """Until the stand-in holds no call; AssertionError after ``within`` s."""
    wait_until(lambda: traingate.pending_total() == 0, within=within, what="held calls ending")


def test_a_dropped_connection_sends_no_answer_at_all(
    standin: tuple[TrainGateStandIn, str],
) -> None:
    traingate, url = standin
    traingate.inject("completed", Fault(0))
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        httpx.post(f"{url}/v1/rollout/completed", json=DONE)
    assert [c.outcome for c in traingate.calls_for("completed", "r1")] == [FAILED]
    assert traingate.reported() == 0


def test_a_lost_acknowledgement_keeps_the_response_and_drops_the_answer(
    standin: tuple[TrainGateStandIn, str],
) -> None:
    traingate, url = standin
    traingate.inject("completed", Fault(200, lose_ack=True))
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(f"{url}/v1/rollout/completed", json=DONE)
    assert httpx.post(f"{url}/v1/rollout/completed", json=DONE).status_code == 200
    assert [c.outcome for c in traingate.calls_for("completed", "r1")] == [ACK_LOST, OK]
    assert traingate.completions["r1"] == [DONE, DONE]


def test_a_caller_that_gave_up_waiting_is_an_acknowledgement_lost(
    standin: tuple[TrainGateStandIn, str],
) -> None:
    traingate, url = standin
    traingate.inject("completed", Fault(200, delay=0.6))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/rollout/completed", json=DONE, timeout=0.2)
    assert httpx.post(f"{url}/v1/rollout/completed", json=DONE).status_code == 200
    wait_idle(traingate)
    calls = sorted(traingate.calls_for("completed", "r1"), key=lambda c: c.arrived)
    assert [c.outcome for c in calls] == [ACK_LOST, OK]
    assert traingate.completions["r1"] == [DONE, DONE]  # TrainGate took both


def test_a_targeted_fault_touches_only_its_rollout_and_carries_retry_after(
    standin: tuple[TrainGateStandIn, str],
) -> None:
    traingate, url = standin
    traingate.inject("completed", Fault(429, count=2, retry_after="3", rollout_id="r2"))
    traingate.inject("completed", Fault(404, rollout_id="r3"))
    assert httpx.post(f"{url}/v1/rollout/completed", json=DONE).status_code == 200
    other = {**DONE, "rollout_id": "r2"}
    answers = [httpx.post(f"{url}/v1/rollout/completed", json=other) for _ in range(3)]
    assert [a.status_code for a in answers] == [429, 429, 200]
    assert answers[0].headers["retry-after"] == "3"
    refused = httpx.post(f"{url}/v1/rollout/completed", json={**DONE, "rollout_id": "r3"})
    assert refused.status_code == 404
    assert [c.outcome for c in traingate.calls_for("completed", "r3")] == [REFUSED]


def test_runs_are_counted_by_run_id_not_by_call(standin: tuple[TrainGateStandIn, str]) -> None:
    traingate, url = standin
    traingate.inject("chat", Fault(503, rollout_id="r1"))
    for body in (chat("r1", "a"), chat("r1", "a"), chat("r1", "a", turn=2)):
        httpx.post(f"{url}/v1/chat/completions", json=body)
    assert (traingate.runs("r1"), traingate.chat_count("r1")) == (1, 2)
    # A run whose every call failed is still a run.
    traingate.inject("chat", Fault(503, rollout_id="r5"))
    httpx.post(f"{url}/v1/chat/completions", json=chat("r5", "c"))
    assert (traingate.runs("r5"), traingate.chat_count("r5")) == (1, 0)
    httpx.post(f"{url}/v1/chat/completions", json=chat("r1", "b"))
    assert traingate.runs("r1") == 2
    # Without a run id, each call opening a conversation is a run.
    for body in (chat("r4", None), chat("r4", None, turn=2), chat("r4", None)):
        httpx.post(f"{url}/v1/chat/completions", json=body)
    assert traingate.runs("r4") == 2


def test_release_ends_a_hang_at_once(standin: tuple[TrainGateStandIn, str]) -> None:
    traingate, url = standin
    traingate.inject("completed", Fault(503, delay=30))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/rollout/completed", json=DONE, timeout=0.3)
    assert traingate.pending("completed", "r1") == 1
    traingate.release()
    wait_idle(traingate, within=1.0)  # the hang ends within one 0.05 s step
    assert [c.outcome for c in traingate.calls_for("completed", "r1")] == [FAILED]


def test_what_a_rollout_received_reads_back_over_http_with_the_callback_key() -> None:
    traingate = TrainGateStandIn(callback_key="cb-key")
    key = {"Authorization": "Bearer cb-key"}
    with ServerThread(traingate.app, timeout_graceful_shutdown=1) as server:
        url = f"{server.url}/standin/rollouts/r1"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer other"}).status_code == 401
        nothing = httpx.get(url, headers=key).json()
        assert nothing == {
            "rollout_id": "r1",
            "completions": [],
            "completed_calls": [],
            "chat_calls": 0,
            "runs": 0,
        }
        assert traingate.reported() == 0  # reading creates no entry
        httpx.post(f"{server.url}/v1/chat/completions", json=chat("r1", "a"), headers=key)
        traingate.inject("completed", Fault(503, rollout_id="r1"))
        for _ in range(2):
            httpx.post(f"{server.url}/v1/rollout/completed", json=DONE, headers=key)
        seen = httpx.get(url, headers=key).json()
    assert seen["completions"] == [DONE]
    assert seen["completed_calls"] == [FAILED, OK]
    assert (seen["chat_calls"], seen["runs"]) == (1, 1)


def test_the_stand_in_process_serves_other_machines_only_with_a_callback_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from testkit.standin_server import KEY_VARIABLE, main

    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["--port", "1", "--host", "0.0.0.0"])
    assert exited.value.code == 2
    assert KEY_VARIABLE in capsys.readouterr().err
