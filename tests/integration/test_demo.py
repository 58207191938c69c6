"""``rollout-sdk demo`` from the project root, as a user runs it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from testkit import REPO_ROOT
from testkit.aws import fake_aws_env
from testkit.wait import wait_until

from .support import CLI, run_cli

pytestmark = pytest.mark.integration


def _count(label: str, output: str) -> int:
    match = re.search(rf"^\s+{re.escape(label)}\s+(\d+)\s*$", output, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{output}"
    return int(match.group(1))


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_demo_runs_the_dataset_and_prints_the_summary(store: str) -> None:
    rows = sum(
        1
        for line in (REPO_ROOT / "examples/calculator/dataset.jsonl").read_text().splitlines()
        if line.strip()
    )
    result = run_cli("demo", "--repeat", "1", "--store", store, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert _count("rollouts", out) == rows
    assert _count("COMPLETED", out) == rows
    assert _count("ERROR", out) == 0
    assert _count("missing", out) == 0
    assert _count("duplicates received", out) == 0
    assert re.search(r"^\s+errors by category\s+none\s*$", out, re.MULTILINE), out
    # The scripted model answers every 7th rollout (by id hash) off by one.
    reward = re.search(r"mean reward\s+([0-9.]+)", out)
    assert reward and 0.5 < float(reward.group(1)) < 1.0, out
    assert re.search(r"rollout total_latency(\s+[0-9.]+){3}", out), out
    assert re.search(r"init round trip(\s+[0-9.]+){3}", out), out
    assert "rollouts/s" in out
    assert "OK: every rollout was reported exactly once" in out
    assert f"store {store}" in out
    # stderr is not a terminal here: progress comes as a line per rollout (test's lines).
    assert f"[{rows}/{rows}] row " in result.stderr
    assert len(re.findall(r"^\[\d+/\d+\] row \d+: OK ", result.stderr, re.MULTILINE)) == rows
    assert "\r" not in result.stderr


FAILING_AGENT = """
from rollout_sdk import OpenAIFunctionSchema, OpenAIFunctionToolSchema, RolloutAgentLoop


class Failing(RolloutAgentLoop):
    name = "failing"

    def get_tools(self, request):
        return [OpenAIFunctionToolSchema(function=OpenAIFunctionSchema(
            name="noop", description="Does nothing"))]

    async def run(self, ctx):
        how = ctx.request.metadata.get("fail")
        if how == "raise":
            raise RuntimeError("the agent broke")
        # A NaN reward: a result the protocol cannot carry.
        reward = float("nan") if how == "nan" else 1.0
        return ctx.complete(list(ctx.request.messages), reward=reward)


agent_loop = Failing()
"""


def test_demo_counts_errors_by_the_category_each_carries(tmp_path: Path) -> None:
    (tmp_path / "failing_agent.py").write_text(FAILING_AGENT)
    dataset = tmp_path / "rows.jsonl"
    rows = ["raise", "raise", "raise", "nan", None]
    dataset.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": "hi"}], "metadata": {"fail": f}})
            + "\n"
            for f in rows
        )
    )
    result = run_cli(
        "demo",
        "--agent",
        "failing_agent:agent_loop",
        "--dataset",
        str(dataset),
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert (_count("COMPLETED", out), _count("ERROR", out)) == (1, 4)
    assert re.search(r"^\s+errors by category\s*$", out, re.MULTILINE), out
    assert (_count("agent_error", out), _count("invalid_result", out)) == (3, 1)
    assert "FAILED: 4 ERROR (3 agent_error, 1 invalid_result)" in out


def test_demo_names_the_file_and_line_of_a_bad_row(tmp_path: Path) -> None:
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text('{"messages": [{"role": "user", "content": "1 + 1"}]}\n{"messages": 3}\n')
    result = run_cli("demo", "--dataset", str(dataset), timeout=30)
    assert result.returncode == 1
    assert f"{dataset}, row 1 (line 2): " in result.stderr
    assert "messages" in result.stderr


def test_demo_fails_when_callbacks_are_missing_at_the_timeout() -> None:
    result = run_cli("demo", "--repeat", "4", "--timeout", "0.05", timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _count("missing", result.stdout) > 0
    assert "FAILED: timed out waiting for callbacks" in result.stdout


def test_demo_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [CLI, "demo", "--repeat", "200", "--concurrency", "4"],
            cwd=REPO_ROOT,
            env=fake_aws_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        try:

            def reporting() -> bool:
                assert process.poll() is None, log.read_text()
                return b"] row " in log.read_bytes()

            wait_until(reporting, within=30, what="the demo reporting")
            process.send_signal(signal.SIGINT)
            stdout, _ = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    errors = log.read_text()
    assert process.returncode == 130, errors
    assert "interrupted; stopping the servers" in errors
    assert "Traceback" not in errors
    assert stdout == b""
