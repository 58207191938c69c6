"""What the Lambda handlers write for operators: the embedded-metric-format lines on stdout at the
end of each invocation, and a JSON log line per event that names its rollout (and the trace),
also when a queue batch runs many rollouts at once. Everything is read from the process's real
stdout (capfd), as CloudWatch Logs would receive it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.testing.standin import Fault, TrainGateStandIn
from testkit.agents import slow_metadata
from testkit.aws import fake_aws_env
from testkit.imports import probe_import

from .conftest import ROOT
from .test_queue_handoff import batch, receive

EVENTS = ROOT / "events"
TRACE_ROOT = "1-5759e988-bd862e3fe1be46a994272793"
TRACE_HEADER = f"Root={TRACE_ROOT};Parent=53995c3f42cd8ad8;Sampled=1"


def written(out: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The EMF blobs and the JSON log lines in ``out``, in order (other lines are skipped)."""
    blobs: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        document = json.loads(line)
        (blobs if "_aws" in document else logs).append(document)
    return blobs, logs


def metrics_of(blob: dict[str, Any]) -> dict[str, Any]:
    """A blob's namespace, dimension names and values, and each metric's unit and values."""
    (directive,) = blob["_aws"]["CloudWatchMetrics"]
    (dimensions,) = directive["Dimensions"]
    return {
        "namespace": directive["Namespace"],
        "dimensions": {name: blob[name] for name in dimensions},
        "metrics": {m["Name"]: (m["Unit"], blob[m["Name"]]) for m in directive["Metrics"]},
    }


def _init_event(url: str, rollout_id: str, **body_fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=url, rollout_id=rollout_id, **body_fields)
    event["body"] = json.dumps(body)
    return event


def logs_to_stdout(module: Any) -> None:
    """Point the handler's Powertools log handler at file descriptor 1, as Lambda's stdout is.

    The Logger is built once per process (Powertools keeps a configured logger), with the stdout
    of whichever test imported handler.py first; capfd captures descriptor 1, so the handler must
    write there for a test to read what it writes.
    """
    stream = open(1, "w", closefd=False, encoding="utf-8")  # noqa: SIM115 - lives with the process
    module.logger.registered_handler.setStream(stream)


@pytest.fixture(autouse=True)
def _stdout_logs(request: pytest.FixtureRequest) -> None:
    if "handler" in request.fixturenames:
        logs_to_stdout(request.getfixturevalue("handler"))


#: The observability tests' agent, which logs a line of its own each turn; a TrainGate fault fails
#: a chat call at once.
OBSERVED = {
    "AGENT_LOOP": "testkit.agents:observed_agent",
    "OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES": "0",
}
observed_direct = pytest.mark.parametrize("handler", [OBSERVED], indirect=True)
observed_queue = pytest.mark.parametrize(
    "handler", [{**OBSERVED, "HAND_OFF": "queue"}], indirect=True
)


def _init_all(handler: Any, url: str, rollouts: dict[str, dict[str, Any]]) -> list[Any]:
    """Init each rollout (its metadata); the worker events the API function handed off."""
    jobs: list[Any] = []
    for rid, metadata in rollouts.items():
        init = invoke(
            handler, "ApiFunction", _init_event(url, rid, metadata=metadata), timeout_seconds=29
        )
        assert init.result["statusCode"] == 202
        jobs.extend(init.dispatched)
    return jobs


def test_each_invocation_writes_its_metrics_as_emf_lines_when_it_ends(
    handler: Any, standin: tuple[TrainGateStandIn, str], capfd: pytest.CaptureFixture[str]
) -> None:
    _, url = standin
    capfd.readouterr()
    init = invoke(handler, "ApiFunction", _init_event(url, "emf-1"), timeout_seconds=29)
    assert init.result["statusCode"] == 202
    blobs, _ = written(capfd.readouterr().out)
    assert [metrics_of(b) for b in blobs] == [
        {
            # The emulator's namespace: what `rollout-sdk invoke` runs stays out of the deployed
            # stack's (RolloutSDK, template.yaml).
            "namespace": "RolloutSdkLocal",
            "dimensions": {"Function": "api", "HandOff": "direct"},
            "metrics": {"ColdStarts": ("Count", [1.0]), "RolloutsAccepted": ("Count", [1.0])},
        }
    ]
    # A duplicate starts nothing and counts nothing; the cold start was counted once.
    invoke(handler, "ApiFunction", _init_event(url, "emf-1"), timeout_seconds=29)
    assert written(capfd.readouterr().out)[0] == []

    ran = invoke(handler, "WorkerFunction", init.dispatched[0], timeout_seconds=900)
    assert ran.result["state"] == "DELIVERED"
    blobs, _ = written(capfd.readouterr().out)
    summary = [metrics_of(b) for b in blobs]
    assert [s["dimensions"] for s in summary] == [
        {"Function": "worker", "HandOff": "direct"},
        {"Function": "worker", "HandOff": "direct", "Status": "COMPLETED", "Category": "none"},
    ]
    counted = summary[0]["metrics"]
    assert sorted(counted) == [
        "CallbackAttempts",
        "ChatCallLatency",
        "ColdStarts",
        "RolloutCost",
        "RolloutDuration",
        "RolloutsDelivered",
        "RolloutsStarted",
    ]
    assert counted["RolloutsStarted"] == ("Count", [1.0])
    # The full cost estimate once delivered (US dollars, from the cost sink): small, not zero.
    cost_unit, costs = counted["RolloutCost"]
    assert cost_unit == "None" and len(costs) == 1 and 0 < costs[0] < 0.01
    assert counted["RolloutsDelivered"] == ("Count", [1.0])
    assert counted["CallbackAttempts"] == ("Count", [1.0])
    unit, latencies = counted["ChatCallLatency"]
    assert unit == "Milliseconds"
    assert len(latencies) == 2  # the calculator's two chat calls
    assert all(0 < value < 30_000 for value in latencies)
    assert counted["RolloutDuration"][0] == "Seconds"
    assert summary[1]["metrics"] == {"RolloutsFinished": ("Count", [1.0])}
    # Never a rollout id: not as a dimension, not as a property of the blob.
    assert all("emf-1" not in json.dumps(b) and "service" not in b for b in blobs)

    # A redelivered event runs nothing: nothing to count.
    invoke(handler, "WorkerFunction", init.dispatched[0], timeout_seconds=900)
    assert written(capfd.readouterr().out)[0] == []


@observed_direct
def test_an_agent_error_and_an_infrastructure_failure_are_counted_by_category(
    handler: Any, standin: tuple[TrainGateStandIn, str], capfd: pytest.CaptureFixture[str]
) -> None:
    traingate, url = standin
    traingate.inject("chat", Fault(500, count=50, rollout_id="infra-1"))
    jobs = _init_all(handler, url, {"agent-1": {"fail": "the tool broke"}, "infra-1": {}})
    capfd.readouterr()
    finished: list[dict[str, str]] = []
    for job in jobs:
        invoke(handler, "WorkerFunction", job, timeout_seconds=900)
        blobs, _ = written(capfd.readouterr().out)
        finished.extend(
            metrics_of(b)["dimensions"] for b in blobs if "RolloutsFinished" in json.dumps(b)
        )
    assert finished == [
        {"Function": "worker", "HandOff": "direct", "Status": "ERROR", "Category": "agent_error"},
        {
            "Function": "worker",
            "HandOff": "direct",
            "Status": "ERROR",
            "Category": "infrastructure",
        },
    ]
    assert [traingate.completions[rid][0]["status"] for rid in ("agent-1", "infra-1")] == [
        "ERROR",
        "ERROR",
    ]


@observed_queue
def test_every_line_of_a_queue_batch_names_its_own_rollout_and_the_trace(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, url = standin
    ids = [f"batch-{i}" for i in range(4)]
    slow = slow_metadata(turns=3, turn_delay=0.05)
    assert _init_all(handler, url, dict.fromkeys(ids, slow)) == []  # the queue carries them
    messages = receive(handler.runtime.clients.sqs, resources.queue_url)
    assert len(messages) == len(ids)
    monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE_HEADER)  # as Lambda sets it per invocation
    capfd.readouterr()
    ran = invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
    assert ran.result == {"batchItemFailures": []}
    blobs, logs = written(capfd.readouterr().out)

    # The agent's own lines name no rollout; the log context does, per task.
    turns = [line for line in logs if line["message"].startswith("turn ")]
    assert len(turns) == 3 * len(ids)
    for line in turns:
        assert line["message"].endswith(f"of {line['rollout_id']}"), line
        assert line["xray_trace_id"] == TRACE_ROOT
    order = [line["rollout_id"] for line in turns]
    assert order[: len(ids)] != [order[0]] * len(ids), "the batch's rollouts did not interleave"
    # Every line of the batch was written while one of its rollouts ran: each names it, and the
    # invocation's trace.
    assert all(line.get("rollout_id") in ids for line in logs), logs
    assert all(line["xray_trace_id"] == TRACE_ROOT for line in logs)

    finished = [metrics_of(b) for b in blobs if "Status" in b]
    assert finished == [
        {
            "namespace": "RolloutSdkLocal",
            "dimensions": {
                "Function": "queue_worker",
                "HandOff": "queue",
                "Status": "COMPLETED",
                "Category": "none",
            },
            "metrics": {"RolloutsFinished": ("Count", [1.0] * len(ids))},
        }
    ]


class BrokenStdout:
    """A stdout whose every write fails, as a closed pipe does."""

    def write(self, text: str) -> int:
        raise OSError("stdout is closed")

    def flush(self) -> None:
        raise OSError("stdout is closed")


def test_metrics_that_cannot_be_written_never_fail_a_rollout_and_are_logged_once(
    handler: Any,
    standin: tuple[TrainGateStandIn, str],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traingate, url = standin
    jobs = _init_all(handler, url, {"broken-1": {}, "broken-2": {}})
    capfd.readouterr()
    # The Logger keeps the stream it was built with; EMF lines go through print (sys.stdout).
    monkeypatch.setattr(sys, "stdout", BrokenStdout())
    results = [invoke(handler, "WorkerFunction", job, timeout_seconds=900) for job in jobs]
    monkeypatch.undo()
    assert [r.result["state"] for r in results] == ["DELIVERED", "DELIVERED"]
    assert [len(traingate.completions[rid]) for rid in ("broken-1", "broken-2")] == [1, 1]
    _, logs = written(capfd.readouterr().out)
    failures = [line for line in logs if "writing CloudWatch metrics failed" in line["message"]]
    assert len(failures) == 1
    assert "stdout is closed" in failures[0]["exception"]


def test_the_api_function_serves_no_metrics_endpoint(handler: Any) -> None:
    event = load_event(EVENTS / "platform-health.json")
    event["rawPath"] = "/metrics"
    event["requestContext"] = {
        **event["requestContext"],
        "http": {**event["requestContext"]["http"], "path": "/metrics"},
    }
    call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert call.result["statusCode"] == 404


def _cold_start(tracing: bool) -> list[str]:
    """The X-Ray SDK's modules a fresh process loads importing handler.py (Powertools' package
    imports its Tracer module either way; that module loads the SDK only when a Tracer is
    built)."""
    env = fake_aws_env(
        {
            "AGENT_LOOP": "examples.calculator.agent:agent_loop",
            "TABLE_NAME": "t",
            "PYTHONPATH": str(ROOT),
            "LAMBDA_TASK_ROOT": str(ROOT),
            "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true",
        }
    )
    probe = probe_import("import handler", env=env, cwd=ROOT)
    assert probe.ok, probe.error
    return probe.loaded(["aws_xray_sdk"])


def test_the_cold_start_imports_the_xray_sdk_only_when_tracing_is_on() -> None:
    assert _cold_start(tracing=False) == []
    assert "aws_xray_sdk.core.recorder" in _cold_start(tracing=True)


class FacadeLike:
    """The invocation's segment as the recorder hands it out in Lambda (sampled)."""

    sampled = True
    trace_id = TRACE_ROOT
    id = "53995c3f42cd8ad8"

    def __init__(self) -> None:
        self.children: list[Any] = []

    def add_subsegment(self, subsegment: Any) -> None:
        subsegment.parent_id = self.id
        self.children.append(subsegment)

    def increment(self) -> None:
        pass

    def decrement_ref_counter(self) -> None:
        pass


class FailingRecorder:
    """An X-Ray recorder that hands out the segment, but cannot send (``stream_fails``) or cannot
    even find the segment."""

    def __init__(self, *, stream_fails: bool) -> None:
        self.segment = FacadeLike()
        self.stream_fails = stream_fails

    def current_segment(self) -> FacadeLike:
        if not self.stream_fails:
            raise RuntimeError("no segment to be had")
        return self.segment

    def stream_subsegments(self) -> None:
        raise OSError("the daemon socket is closed")


@pytest.fixture
def xray_sdk() -> Iterator[None]:
    """The X-Ray SDK imported in this process. Its import builds a global recorder whose emitter
    holds a UDP socket for the process's life; it is closed afterwards, so that the
    interpreter's exit does not warn about it."""
    yield
    from aws_xray_sdk.core import xray_recorder

    xray_recorder.emitter._socket.close()


@pytest.mark.usefixtures("xray_sdk")
@pytest.mark.parametrize("stream_fails", [False, True])
def test_a_tracer_that_fails_never_fails_the_traced_work_and_is_logged_once(
    stream_fails: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from rollout_sdk.aws.telemetry import XRaySpans
    from rollout_sdk.telemetry import Span

    recorder = FailingRecorder(stream_fails=stream_fails)
    spans = XRaySpans(tracer=SimpleNamespace(provider=recorder, disabled=False))
    ran = []
    for _ in range(3):
        with spans.span(Span.CHAT, rollout_id="r-1"):
            ran.append(1)
    with (
        pytest.raises(ValueError, match="the block's own"),
        spans.span(Span.CALLBACK, rollout_id="r-1"),
    ):
        raise ValueError("the block's own")
    assert ran == [1, 1, 1]
    logged = [r for r in caplog.records if "recording a trace subsegment failed" in r.message]
    assert len(logged) == 1
    if stream_fails:  # the subsegments were made, annotated and closed before the send failed
        assert [c.annotations for c in recorder.segment.children] == [{"rollout_id": "r-1"}] * 4
        assert all(not c.in_progress for c in recorder.segment.children)
