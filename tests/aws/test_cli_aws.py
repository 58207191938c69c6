"""The AWS-path commands as a user runs them: `invoke` and `serve --store dynamodb`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.load import run_load

from .conftest import ROOT

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "rollout_sdk"]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*CLI, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_invoke_init_follows_the_dispatched_worker_event_to_a_delivered_rollout() -> None:
    done = _run("invoke", "ApiFunction", "events/init.json", "--follow", "--standin")
    assert done.returncode == 0, done.stderr
    assert '"statusCode": 202' in done.stdout
    assert '"state": "DELIVERED"' in done.stdout
    assert "dispatched to WorkerFunction" in done.stderr
    assert "sample-callback-key" not in done.stderr + done.stdout  # masked
    assert "received sample-rollout-0001: COMPLETED reward=1.0" in done.stderr


@pytest.mark.parametrize("event", ["health.json", "platform-health.json"])
def test_invoke_health_events_by_alias(event: str) -> None:
    done = _run("invoke", "api", f"events/{event}")
    assert done.returncode == 0, done.stderr
    # The result alone on stdout, so that a pipe takes it; the logs and metrics on stderr.
    assert json.loads(done.stdout)["statusCode"] == 200
    assert '"ColdStarts"' in done.stderr


def test_invoke_worker_with_no_record_runs_nothing() -> None:
    done = _run("invoke", "worker", "events/worker.json")
    assert done.returncode == 0, done.stderr
    assert '"status": "skipped"' in done.stdout


def test_invoke_names_the_functions_when_given_an_unknown_one() -> None:
    done = _run("invoke", "nope", "events/init.json")
    assert done.returncode == 1
    assert "ApiFunction" in done.stderr and "WorkerFunction" in done.stderr


def test_invoke_names_a_bad_event_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = _run("invoke", "api", str(bad))
    assert done.returncode == 1
    assert str(bad) in done.stderr and "line 1" in done.stderr


def test_serve_on_the_dynamodb_store_holds_a_load() -> None:
    report = run_load(
        rollouts=40, concurrency=10, store="dynamodb", deadline=120, progress_stream=io.StringIO()
    )
    assert report.ok, report.summary()
    assert report.statuses == {"COMPLETED": 40}
    assert report.duplicates == 0


def test_serve_on_a_given_endpoint_creates_only_the_table(
    moto_endpoint: str, tmp_path: Path
) -> None:
    import boto3
    import httpx

    from rollout_sdk.testing.threads import free_port
    from testkit.processes import HTTPSubprocess

    port = free_port()
    argv = [*CLI, "serve", "--agent", "examples.calculator.agent:agent_loop", "--port", str(port)]
    argv += ["--store", "dynamodb", "--dynamodb-endpoint", moto_endpoint, "--log-level", "warning"]
    server = HTTPSubprocess(
        argv,
        url=f"http://127.0.0.1:{port}",
        log_path=tmp_path / "serve.log",
        env={"PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    with server:
        assert httpx.get(f"{server.url}/health", timeout=5).json()["agent_loop"] == "calculator"
    session = boto3.session.Session(region_name="us-east-1")
    # By name: a shared emulator may hold more tables than one list_tables page (100).
    described = session.client("dynamodb", endpoint_url=moto_endpoint).describe_table(
        TableName="rollout-sdk-local-rollouts"
    )
    assert described["Table"]["TableStatus"] == "ACTIVE"
    functions = session.client("lambda", endpoint_url=moto_endpoint).list_functions()["Functions"]
    assert not [f for f in functions if f["FunctionName"].startswith("rollout-sdk-local")]
    buckets = session.client("s3", endpoint_url=moto_endpoint).list_buckets()["Buckets"]
    assert not [b for b in buckets if b["Name"].startswith("rollout-sdk-local")]


def test_serve_reports_an_unreachable_endpoint_without_a_traceback() -> None:
    done = _run(
        "serve",
        "--agent",
        "examples.calculator.agent:agent_loop",
        "--store",
        "dynamodb",
        "--dynamodb-endpoint",
        "http://127.0.0.1:9",
        timeout=120,
    )
    assert done.returncode == 1
    assert "cannot use the DynamoDB endpoint http://127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr
