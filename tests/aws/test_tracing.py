"""Tracing as the functions do it on Lambda, with the template's Tracing=subsegments: one
execution environment in a process of its own (the X-Ray SDK decides at import that it runs in
Lambda), ``LAMBDA_TASK_ROOT`` and each invocation's ``_X_AMZN_TRACE_ID`` set as Lambda sets
them, and the segments it sends caught on a UDP socket on 127.0.0.1 (``AWS_XRAY_DAEMON_ADDRESS``)
together with what it writes to stdout: for a rollout that succeeds, one whose agent raises, one
that fails on TrainGate's side (infrastructure), and one whose invocations were not sampled."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import function_environment, load_event
from rollout_sdk.testing.standin import LOOPBACK_TRAINGATE, Fault, TrainGateStandIn
from testkit.aws import fake_aws_env

from .conftest import ROOT

EVENTS = ROOT / "events"
#: One per rollout: (rollout id, metadata, sampled).
CASES: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("ok-1", {}, True),
    ("agent-1", {"fail": "the tool broke"}, True),
    ("infra-1", {}, True),
    ("unsampled-1", {}, False),
)


@dataclass
class Daemon:
    """A UDP socket standing in for the X-Ray daemon: every datagram it receives, decoded."""

    sock: socket.socket
    documents: list[dict[str, Any]] = field(default_factory=list)

    @property
    def address(self) -> str:
        host, port = self.sock.getsockname()
        return f"{host}:{port}"

    def serve(self) -> None:
        while True:
            try:
                data = self.sock.recv(65535)
            except OSError:
                return  # closed
            header, _, body = data.decode("utf-8").partition("\n")
            assert json.loads(header) == {"format": "json", "version": 1}
            self.documents.append(json.loads(body))


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    listening = Daemon(sock)
    thread = threading.Thread(target=listening.serve, daemon=True)
    thread.start()
    try:
        yield listening
    finally:
        sock.close()
        thread.join(timeout=5)


def _header(index: int, step: int, sampled: bool) -> tuple[str, str, str]:
    root = f"1-5f84c7a{index}-{step:024x}"
    parent = f"{index:08x}{step:08x}"
    return f"Root={root};Parent={parent};Sampled={int(sampled)}", root, parent


def _init_event(url: str, rollout_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=url, rollout_id=rollout_id, metadata=metadata)
    event["body"] = json.dumps(body)
    return event


def _steps_by_marker(out: str) -> list[list[str]]:
    """The child's stdout lines, split per step at its markers."""
    steps: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("=== step "):
            steps.append([])
        elif steps:
            steps[-1].append(line)
    return steps


def test_subsegments_and_metrics_of_a_success_an_agent_error_and_an_infrastructure_failure(
    resources: LocalResources,
    template: dict[str, Any],
    standin: tuple[TrainGateStandIn, str],
    daemon: Daemon,
    tmp_path: Path,
) -> None:
    traingate, url = standin
    traingate.inject("chat", Fault(500, count=50, rollout_id="infra-1"))
    plan: list[dict[str, Any]] = []
    traces: dict[tuple[str, str], tuple[str, str]] = {}
    for index, (rid, metadata, sampled) in enumerate(CASES):
        for step, (function, event, timeout) in enumerate(
            (
                ("ApiFunction", _init_event(url, rid, metadata), 29),
                ("WorkerFunction", "dispatched", 900),
            )
        ):
            header, root, parent = _header(index, step, sampled)
            traces[(rid, function)] = (root, parent)
            plan.append({"function": function, "event": event, "trace": header, "timeout": timeout})
    plan_file, out_file = tmp_path / "plan.json", tmp_path / "out.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    env = function_environment(template, "ApiFunction", resources, LOOPBACK_TRAINGATE)
    env.update(
        AGENT_LOOP="testkit.agents:observed_agent",
        POWERTOOLS_TRACE_DISABLED="false",  # Tracing=subsegments
        LAMBDA_TASK_ROOT=str(ROOT),
        AWS_XRAY_DAEMON_ADDRESS=daemon.address,
        OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES="0",  # the infrastructure failure, at once
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "testkit.lambda_session", str(plan_file), str(out_file)],
        env=fake_aws_env(env, clean=True),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out_file.read_text(encoding="utf-8"))
    worker_states = [r["result"]["state"] for r in results if r["function"] == "WorkerFunction"]
    assert worker_states == ["DELIVERED"] * len(CASES)
    assert [traingate.completions[rid][0]["status"] for rid, _, _ in CASES] == [
        "COMPLETED",
        "ERROR",
        "ERROR",
        "COMPLETED",
    ]

    # --- the trace segments, as the daemon received them
    by_rollout: dict[str, list[dict[str, Any]]] = {}
    for document in daemon.documents:
        assert document["type"] == "subsegment"
        by_rollout.setdefault(document["annotations"]["rollout_id"], []).append(document)
    assert sorted(by_rollout) == ["agent-1", "infra-1", "ok-1"]  # the unsampled one sent none

    def names(rid: str, function: str) -> list[str]:
        root, parent = traces[(rid, function)]
        mine = [d for d in by_rollout[rid] if d["trace_id"] == root]
        assert all(d["parent_id"] == parent and d["namespace"] == "local" for d in mine)
        assert all(d["end_time"] >= d["start_time"] for d in mine)
        return [d["name"] for d in mine]

    for rid in ("ok-1", "agent-1", "infra-1"):
        assert names(rid, "ApiFunction") == ["init.claim", "init.hand_off"]
    assert names("ok-1", "WorkerFunction") == ["chat", "chat", "callback"]
    assert names("agent-1", "WorkerFunction") == ["chat", "callback"]
    assert names("infra-1", "WorkerFunction") == ["chat", "callback"]
    (failed_chat,) = [d for d in by_rollout["infra-1"] if d["name"] == "chat"]
    assert failed_chat["fault"] is True
    assert failed_chat["cause"]["exceptions"][0]["type"] == "OsmosisServerError"
    assert not any(d.get("fault") for rid in ("ok-1", "agent-1") for d in by_rollout[rid])

    # --- what each invocation wrote to stdout: its EMF lines, then nothing of the key
    steps = _steps_by_marker(done.stdout)
    assert len(steps) == len(plan)
    finished: list[tuple[str, str]] = []
    for lines in steps[1::2]:  # the worker invocations
        blobs = [json.loads(line) for line in lines if line.startswith('{"_aws"')]
        finished.extend(
            (blob["Status"], blob["Category"]) for blob in blobs if "RolloutsFinished" in blob
        )
    assert finished == [
        ("COMPLETED", "none"),
        ("ERROR", "agent_error"),
        ("ERROR", "infrastructure"),
        ("COMPLETED", "none"),
    ]
    # Kept for reading: what each invocation wrote, and every segment received.
    (tmp_path / "captured.json").write_text(
        json.dumps({"stdout": steps, "segments": daemon.documents}, indent=1), encoding="utf-8"
    )
