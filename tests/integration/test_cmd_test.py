"""``rollout-sdk test`` (and ``demo --base-url``) end to end, against an OpenAI-compatible
stand-in served by uvicorn on 127.0.0.1: never a real endpoint."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.local.cli import main
from rollout_sdk.testing.openai_standin import EndpointFault, OpenAIStandIn
from rollout_sdk.testing.threads import ServerThread, free_port
from testkit import REPO_ROOT
from testkit.aws import fake_aws_env

from .support import CLI

pytestmark = pytest.mark.integration

KEY = "sk-test-0123456789abcdefSECRET"
AGENT = "examples.calculator.agent:agent_loop"
QUESTIONS = [("What is 43 + 4?", "47"), ("What is 6 * 7?", "42"), ("What is 9 - 3?", "6")]
#: What OpenAI's newer models refuse, and what no OpenAI model takes.
STRICT = ("logprobs", "top_logprobs", "rollout_id")


def _dataset(tmp_path: Path, rows: int = 3) -> Path:
    path = tmp_path / "data.jsonl"
    lines = []
    for index in range(rows):
        question, answer = QUESTIONS[index % len(QUESTIONS)]
        lines.append(
            json.dumps(
                {
                    "System_Prompt": "You are a careful calculator. Use the tools.",
                    "user_prompt": question,
                    "GROUND_TRUTH": answer,
                    "difficulty": "easy",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


class Endpoint:
    """The stand-in and its URL."""

    def __init__(self, standin: OpenAIStandIn, url: str) -> None:
        self.standin = standin
        self.url = url
        self.base_url = f"{url}/v1"

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.standin.received]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    standin = OpenAIStandIn(api_key=KEY, refuse=STRICT)
    server = ServerThread(standin.app).start()
    try:
        yield Endpoint(standin, server.url)
    finally:
        standin.release()
        server.stop()


@pytest.fixture(autouse=True)
def _no_outer_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(REPO_ROOT)


def _env(**extra: str) -> dict[str, str]:
    env = fake_aws_env(clean=True)
    env.pop("OPENAI_API_KEY", None)
    return {**env, **extra}


def _cli(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args],
        cwd=REPO_ROOT,
        env=_env(**env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _test_args(endpoint: Endpoint, dataset: Path, *more: str) -> list[str]:
    return ["test", "-m", AGENT, "-d", str(dataset), "--base-url", endpoint.base_url, *more]


# ---------------------------------------------------------------------------- the happy path


def test_rows_run_through_the_kit_and_the_output_has_v1s_shape(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    out = tmp_path / "out" / "results.json"
    result = _cli(
        *_test_args(endpoint, _dataset(tmp_path), "-o", str(out), "--concurrency", "2"),
        OPENAI_API_KEY=KEY,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert list(report) == ["summary", "results"]
    summary = report["summary"]
    assert {k: summary[k] for k in ("total", "passed", "failed")} == {
        "total": 3,
        "passed": 3,
        "failed": 0,
    }
    assert summary["total_tokens"] > 0 and summary["total_duration_ms"] > 0
    assert summary["stopped_early"] is False
    assert [r["row_index"] for r in report["results"]] == [0, 1, 2]
    for row in report["results"]:
        assert list(row) == [
            "row_index",
            "success",
            "error",
            "duration_ms",
            "token_usage",
            "reward",
            "finish_reason",
        ]
        assert row["success"] is True and row["error"] is None and row["reward"] == 1.0
        assert row["finish_reason"] == "stop"
        assert set(row["token_usage"]) == {
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "num_llm_calls",
        }
        assert row["token_usage"]["num_llm_calls"] == 2
    # The summary on stdout; stderr is no terminal: one line per row, no bar.
    assert re.search(r"^\s+COMPLETED\s+3$", result.stdout, re.MULTILINE), result.stdout
    assert re.search(r"^\s+mean reward\s+1\.000 ", result.stdout, re.MULTILINE)
    assert "p50" in result.stdout and "model call" in result.stdout
    assert "[3/3]" in result.stderr and "\r" not in result.stderr
    # What went to the endpoint: the model, the init's tools, the conversation, nothing of
    # TrainGate's, and the key in the header only.
    received = endpoint.standin.received
    assert len(received) == 6
    for request in received:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert KEY not in request.raw.decode()
        body = request.body
        assert body["model"] == "gpt-5-mini"
        assert [t["function"]["name"] for t in body["tools"]] == ["calculate", "square_root"]
        assert "enum" in body["tools"][0]["function"]["parameters"]["properties"]["operation"]
        for dropped in ("rollout_id", "logprobs", "temperature", "top_p", "max_tokens"):
            assert dropped not in body
    # A tool call as the endpoint gave it, then its result, went back in the second turn.
    second = [b for b in endpoint.bodies() if len(b["messages"]) > 2]
    assert len(second) == 3
    for body in second:
        assistant, tool = body["messages"][2], body["messages"][3]
        assert assistant["tool_calls"][0]["function"]["name"] == "calculate"
        assert tool["role"] == "tool" and tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    for text in (result.stdout, result.stderr, out.read_text()):
        assert KEY not in text


def test_csv_with_offset_and_limit(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "data.csv"
    rows = ["SYSTEM_PROMPT,User_Prompt,ground_truth,topic"]
    rows += [f"Use the tools.,What is {n} + 1?,{n + 1},sums" for n in range(5)]
    path.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out.json"
    code = main(
        _test_args(
            endpoint, path, "--offset", "1", "--limit", "2", "--api-key", KEY, "-o", str(out)
        )
    )
    assert code == 0, capsys.readouterr()
    report = json.loads(out.read_text())
    assert [r["row_index"] for r in report["results"]] == [1, 2]
    asked = {b["messages"][1]["content"] for b in endpoint.bodies()}
    assert asked == {"What is 1 + 1?", "What is 2 + 1?"}


def test_parquet_dataset(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "data.parquet"
    table = pa.table(
        {
            "system_prompt": ["Use the tools.", "Use the tools."],
            "user_prompt": ["What is 2 + 2?", "What is 10 * 5?"],
            "ground_truth": ["4", "50"],
        }
    )
    pq.write_table(table, path)
    code = main(_test_args(endpoint, path, "--api-key", KEY, "-q"))
    captured = capsys.readouterr()
    assert code == 0, captured
    assert captured.out == ""  # -q: no summary either (v1)
    assert len(endpoint.standin.received) == 4


def _spawn(args: list[str]) -> subprocess.Popen[str]:
    """``rollout-sdk`` with these arguments, its stdout and stderr piped."""
    return subprocess.Popen(
        [CLI, *args],
        cwd=REPO_ROOT,
        env=_env(OPENAI_API_KEY=KEY),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrency_runs_rows_at_once(endpoint: Endpoint, tmp_path: Path) -> None:
    endpoint.standin.gate = threading.Event()
    process = _spawn(_test_args(endpoint, _dataset(tmp_path, 4), "--concurrency", "4", "-q"))
    try:
        # Four first turns held at the endpoint at the same time: four rows in flight.
        assert endpoint.standin.wait_for_requests(4, timeout=60)
        endpoint.standin.gate.set()
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err


def test_max_tokens_is_mapped_when_the_model_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    standin = OpenAIStandIn(api_key=KEY, refuse=(*STRICT, "max_tokens"))
    with ServerThread(standin.app) as server:
        endpoint = Endpoint(standin, server.url)
        code = main(
            _test_args(endpoint, _dataset(tmp_path, 1), "--api-key", KEY, "--max-tokens", "77")
        )
    assert code == 0, capsys.readouterr()
    first, *rest = endpoint.bodies()
    assert first["max_tokens"] == 77  # not api.openai.com: sent as is, refused once
    assert rest and all(b["max_completion_tokens"] == 77 and "max_tokens" not in b for b in rest)


# ---------------------------------------------------------------------------- -o -

#: An agent that prints on stdout, at its import and in each rollout: with -o -, to stderr.
NOISY_AGENT = """
from examples.calculator.agent import CalculatorAgent

print("noisy agent: imported")


class Noisy(CalculatorAgent):
    async def run(self, ctx):
        print(f"noisy agent: row {ctx.request.metadata['row_index']}")
        return await super().run(ctx)


agent_loop = Noisy()
"""


def test_dash_o_puts_the_results_alone_on_stdout_and_the_rest_on_stderr(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    (tmp_path / "noisy_agent.py").write_text(NOISY_AGENT)
    dataset = _dataset(tmp_path)
    argv = ["test", "-m", "noisy_agent:agent_loop", "-d", str(dataset), "-o", "-"]
    result = _cli(
        *argv,
        "--base-url",
        endpoint.base_url,
        OPENAI_API_KEY=KEY,
        PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO_ROOT}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)  # the whole of stdout: one JSON document
    assert result.stdout.startswith("{") and result.stdout.endswith("}\n")
    assert list(report) == ["summary", "results"]
    assert {k: report["summary"][k] for k in ("total", "passed", "failed")} == {
        "total": 3,
        "passed": 3,
        "failed": 0,
    }
    assert [r["row_index"] for r in report["results"]] == [0, 1, 2]
    # Everything else on stderr: the start-up line, the progress, the summary, the agent's.
    err = result.stderr
    assert "rollout-sdk test: 3 rollouts of 'calculator' on gpt-5-mini at " in err
    assert "[3/3] row " in err
    assert re.search(r"^\s+COMPLETED\s+3$", err, re.MULTILINE), err
    assert "OK: every rollout was reported exactly once" in err
    assert "noisy agent: imported" in err and "noisy agent: row 2" in err
    assert "results written" not in result.stdout + err
    assert not (REPO_ROOT / "-").exists()
    assert KEY not in result.stdout + err


def test_dash_o_writes_the_results_of_a_failed_run_too(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # In process: the -o - path under pytest's capture; a refused key stops the run (exit 1).
    code = main(_test_args(endpoint, _dataset(tmp_path), "-o", "-", "-q", "--api-key", "wrong"))
    captured = capsys.readouterr()
    assert code == 1
    report = json.loads(captured.out)
    assert report["summary"]["stopped_early"] is True and report["summary"]["not_run"] == 2
    # -q: of the rest, only the line that says the run stopped.
    assert captured.err.startswith("rollout-sdk test: stopped early: the endpoint ")
    assert len(captured.err.splitlines()) == 1, captured.err


def test_dash_o_into_a_closed_pipe_says_nothing_more(endpoint: Endpoint, tmp_path: Path) -> None:
    process = _spawn(_test_args(endpoint, _dataset(tmp_path, 1), "-o", "-", "-q"))
    assert process.stdout is not None
    process.stdout.close()  # as `| head -c0` would: the reader is gone before the results
    try:
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1
    assert err == "", err  # no traceback, no "Exception ignored" at the exit's flush


# ---------------------------------------------------------------------------- options


def test_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(_dataset(tmp_path))
    assert main(["test", "-m", AGENT, "-d", data, "--row", "1"]) == 2
    assert "--row needs --interactive" in capsys.readouterr().err
    assert main(["test", "-d", data]) == 2
    assert "-m/--module" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["test", "-m", AGENT, "--mcp", "tools", "-d", data])
    assert exit_.value.code == 2
    assert "not allowed with" in capsys.readouterr().err
    # No key for OpenAI itself: said before anything starts.
    assert main(["test", "-m", AGENT, "-d", data]) == 1
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    assert main(["test", "-m", AGENT, "-d", data, "--model", "anthropic/claude-x"]) == 1
    assert "--base-url" in capsys.readouterr().err
    # -o: not a folder; and - is stdout, which --interactive talks on.
    assert main(["test", "-m", AGENT, "-d", data, "-o", str(tmp_path)]) == 2
    assert f"-o {tmp_path} is a folder: give the file to write" in capsys.readouterr().err
    assert main(["test", "-m", AGENT, "-d", data, "-o", "-", "-i"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--interactive talks on stdout: give -o a file, not -" in captured.err


def test_mcp_without_the_extra_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "rollout_sdk.mcp", None)  # as if not installed
    code = main(["test", "--mcp", str(tmp_path), "-d", str(_dataset(tmp_path)), "--api-key", "k"])
    assert code == 1
    assert "pip install -c constraints.txt -e '.[mcp]' in " in capsys.readouterr().err


def test_an_mcp_folder_runs_as_the_agent(endpoint: Endpoint, tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = _cli(
        "test",
        "--mcp",
        "examples/mcp_calculator",
        "-d",
        str(_dataset(tmp_path, rows=2)),
        "--base-url",
        endpoint.base_url,
        "-o",
        str(out),
        OPENAI_API_KEY=KEY,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert [(r["success"], r["finish_reason"]) for r in report["results"]] == [
        (True, "stop"),
        (True, "stop"),
    ]
    # The MCP server's tools went to the endpoint, and its tool ran: the result came back.
    first = endpoint.bodies()[0]
    assert {t["function"]["name"] for t in first["tools"]} == {"calculate", "square_root"}
    second = [b for b in endpoint.bodies() if len(b["messages"]) > 2]
    assert [b["messages"][3]["role"] for b in second] == ["tool", "tool"]
    assert {b["messages"][3]["content"] for b in second} == {"47", "42"}


def test_a_bad_dataset_names_file_row_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"system_prompt": "s", "user_prompt": "u"}\n')
    assert main(["test", "-m", AGENT, "-d", str(path), "--api-key", "k"]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "row 0 (line 1)" in err and "'ground_truth'" in err


# ---------------------------------------------------------------------------- endpoint failures


def _failing_run(
    capsys: pytest.CaptureFixture[str], endpoint: Endpoint, tmp_path: Path, *more: str
) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "out.json"
    code = main(_test_args(endpoint, _dataset(tmp_path), "-o", str(out), *more))
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return code, json.loads(out.read_text()), text


def test_a_refused_key_is_named_stops_the_run_and_is_never_shown(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    wrong = "sk-wrong-key-abcdef0123456789"
    out = tmp_path / "out.json"
    result = _cli(*_test_args(endpoint, _dataset(tmp_path), "-o", str(out)), OPENAI_API_KEY=wrong)
    assert result.returncode == 1
    text = result.stdout + result.stderr
    assert "refused the API key (HTTP 401)" in text and "Fix:" in text
    assert "Traceback" not in text
    report = json.loads(out.read_text())
    # Every row would fail the same way: one ran, the rest did not start.
    assert report["summary"]["stopped_early"] is True
    assert report["summary"]["total"] == 1 and report["summary"]["not_run"] == 2
    assert report["summary"]["errors_by_category"] == {"unauthorized": 1}
    assert "STOPPED EARLY" in result.stdout
    # The stand-in echoed the key it got; it is cut from everything the command wrote.
    for written in (result.stdout, result.stderr, out.read_text()):
        assert wrong not in written


def test_debug_shows_the_kits_logs_but_never_the_key(endpoint: Endpoint, tmp_path: Path) -> None:
    endpoint.standin.inject(EndpointFault(500, count=1))  # a failure the logs will mention
    result = subprocess.run(
        [CLI, *_test_args(endpoint, _dataset(tmp_path, 1), "--debug")],
        cwd=tmp_path,  # ./test_debug lands here
        env=_env(OPENAI_API_KEY=KEY, PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr  # the 500 was retried by the kit's client
    assert "DEBUG" in result.stderr
    assert KEY not in result.stdout + result.stderr


def test_an_unknown_model_is_named(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, text = _failing_run(
        capsys, endpoint, tmp_path, "--api-key", KEY, "--model", "openai/gpt-nope"
    )
    assert code == 1
    assert "HTTP 404 for model 'gpt-nope'" in text and "--model" in text
    assert report["results"][0]["error"].startswith("the endpoint")
    assert report["summary"]["errors_by_category"] == {"model_not_found": 1}
    assert endpoint.bodies()[0]["model"] == "gpt-nope"  # openai/ stripped


def test_rate_limits_are_retried_then_named(
    endpoint: Endpoint,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OSMOSIS_ROLLOUT_CLIENT_RETRY_BASE_DELAY", "0")
    monkeypatch.setenv("OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES", "2")
    # Row 0: one 429, then answers (the kit's retry). Row 1: 429 on every attempt.
    endpoint.standin.inject(EndpointFault(429, count=1, retry_after="0"))
    code, report, text = _failing_run(capsys, endpoint, tmp_path, "--api-key", KEY)
    # (the faults are taken in order: row 0 got the single one)
    assert code == 0, text
    assert report["summary"]["passed"] == 3
    endpoint.standin.received.clear()
    endpoint.standin.inject(EndpointFault(429, count=1000, retry_after="0", message="slow down"))
    code, report, text = _failing_run(capsys, endpoint, tmp_path, "--api-key", KEY)
    assert code == 1
    assert "rate-limited the call (HTTP 429): slow down. Fix: lower --concurrency" in text
    # Not systemic: every row ran, each tried 1 + 2 times.
    assert report["summary"]["stopped_early"] is False and report["summary"]["failed"] == 3
    assert len(endpoint.standin.received) == 9


def test_a_timeout_is_named(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.standin.inject(EndpointFault(200, count=1000, delay=30))
    code, report, text = _failing_run(
        capsys, endpoint, tmp_path, "--api-key", KEY, "--timeout", "0.3", "--limit", "1"
    )
    assert code == 1
    assert "did not answer within 0.3 s. Fix: raise --timeout" in text
    assert report["summary"]["errors_by_category"] == {"timeout": 1}


def test_a_refused_connection_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nobody = Endpoint(OpenAIStandIn(), f"http://127.0.0.1:{free_port()}")
    code, report, text = _failing_run(capsys, nobody, tmp_path)
    assert code == 1
    assert "cannot reach the endpoint" in text and "Fix: check --base-url" in text
    assert report["summary"]["stopped_early"] is True


def test_a_400_is_named_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    standin = OpenAIStandIn(api_key=KEY, refuse=(*STRICT, "temperature"))
    with ServerThread(standin.app) as server:
        code, report, text = _failing_run(
            capsys,
            Endpoint(standin, server.url),
            tmp_path,
            "--api-key",
            KEY,
            "--temperature",
            "0.2",
        )
    assert code == 1
    assert "refused the request (HTTP 400): Unsupported parameter: 'temperature'" in text
    assert "--temperature" in report["results"][0]["error"]
    assert report["summary"]["errors_by_category"] == {"bad_request": 3}


# ---------------------------------------------------------------------------- the endpoint's secrets

SECRET = "pw-0123456789SECRET"
BASIC = base64.b64encode(f"user:{SECRET}".encode()).decode()


def _with_user_info(url: str) -> str:
    """``url`` (http://127.0.0.1:PORT/v1) with ``user:SECRET@`` in it."""
    return url.replace("http://", f"http://user:{SECRET}@", 1)


def _never_shown(*texts: str, secrets: tuple[str, ...] = (SECRET, BASIC)) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text, text


def _run_on(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, *more: str, rows: int = 3
) -> tuple[int, str, str, str]:
    """``rollout-sdk test`` at ``url``: the exit status, stdout, stderr and the -o file."""
    out = tmp_path / "out.json"
    argv = ["test", "-m", AGENT, "-d", str(_dataset(tmp_path, rows)), "--base-url", url]
    code = main([*argv, "-o", str(out), *more])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err, out.read_text()


def test_user_info_in_the_base_url_is_sent_as_basic_auth_and_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # not sent: the URL's credentials are meant
    standin = OpenAIStandIn()
    with ServerThread(standin.app) as server:
        code, out, err, written = _run_on(capsys, _with_user_info(f"{server.url}/v1"), tmp_path)
    assert code == 0, out + err
    host = server.url.removeprefix("http://")
    assert f"at http://***@{host}/v1, 1 at a time" in err
    assert {r.headers["authorization"] for r in standin.received} == {f"Basic {BASIC}"}
    _never_shown(out, err, written, secrets=(SECRET, BASIC, KEY))


def test_user_info_is_never_shown_when_the_endpoint_refuses_it(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stand-in wants a Bearer key: it refuses the Basic credentials, echoing them.
    code, out, err, written = _run_on(capsys, _with_user_info(endpoint.base_url), tmp_path)
    assert code == 1
    assert "refused the API key (HTTP 401)" in out and "http://***@127.0.0.1" in out
    assert "the user info of --base-url was sent as HTTP Basic auth" in out
    assert json.loads(written)["summary"]["stop_reason"].startswith("the endpoint http://***@")
    assert [r.headers["authorization"] for r in endpoint.standin.received] == [f"Basic {BASIC}"]
    _never_shown(out, err, written)


def test_credentials_are_never_shown_when_the_endpoint_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _with_user_info(f"http://127.0.0.1:{free_port()}/v1?api-key=Q{SECRET}")
    code, out, err, written = _run_on(capsys, url, tmp_path)
    assert code == 1
    assert "cannot reach the endpoint http://***@127.0.0.1:" in out
    assert "/v1?api-key=***" in out and "/v1?api-key=***" in err
    _never_shown(out, err, written)


def test_credentials_are_refused_with_a_key_and_in_a_bad_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(_dataset(tmp_path))
    url = _with_user_info("http://127.0.0.1:9/v1")
    assert main(["test", "-m", AGENT, "-d", data, "--base-url", url, "--api-key", KEY]) == 1
    err = capsys.readouterr().err
    assert "one Authorization header" in err
    bad = f"user:{SECRET}@127.0.0.1:9/v1"  # no scheme
    assert main(["test", "-m", AGENT, "-d", data, "--base-url", bad]) == 1
    err += capsys.readouterr().err
    assert "is not an http(s) URL" in err
    _never_shown(err, secrets=(SECRET, KEY))


def test_a_key_in_the_query_string_is_sent_and_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    standin = OpenAIStandIn(refuse=STRICT)
    query = f"api-key={SECRET}&api-version=2024-06-01"
    with ServerThread(standin.app) as server:
        code, out, err, written = _run_on(capsys, f"{server.url}/v1?{query}", tmp_path, rows=1)
    assert code == 0, out + err
    assert "/v1?api-key=***&api-version=2024-06-01, 1 at a time" in err
    assert [r.query for r in standin.received] == [query, query]  # after the path, as given
    _never_shown(out, err, written)


def test_debug_logs_never_show_the_url_s_credentials(tmp_path: Path) -> None:
    standin = OpenAIStandIn(refuse=STRICT)
    standin.inject(EndpointFault(500, count=1, message=f"Basic {BASIC} failed"))
    with ServerThread(standin.app) as server:
        result = subprocess.run(
            [
                CLI,
                *_test_args(Endpoint(standin, _with_user_info(server.url)), _dataset(tmp_path, 1)),
                "--debug",
            ],
            cwd=tmp_path,
            env=_env(PYTHONPATH=str(REPO_ROOT)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr  # the 500 was retried
    assert "DEBUG" in result.stderr and "http://***@127.0.0.1" in result.stderr
    _never_shown(result.stdout, result.stderr)


def test_demo_never_shows_the_url_s_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    standin = OpenAIStandIn(refuse=STRICT)
    with ServerThread(standin.app) as server:
        code = main(["demo", "--base-url", _with_user_info(f"{server.url}/v1")])
    captured = capsys.readouterr()
    assert code == 0, captured
    assert " at http://***@127.0.0.1:" in captured.out
    _never_shown(captured.out, captured.err)


# ---------------------------------------------------------------------------- --api-key-file


def test_the_key_can_come_from_a_file(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "openai.key"
    key_file.write_text(f"{KEY}\n")
    data = _dataset(tmp_path, 1)
    assert main(_test_args(endpoint, data, "--api-key-file", str(key_file))) == 0
    captured = capsys.readouterr()
    assert [r.headers["authorization"] for r in endpoint.standin.received] == [f"Bearer {KEY}"] * 2
    _never_shown(captured.out, captured.err, secrets=(KEY,))
    # A file that gives no key stops the command before anything starts, naming the flag.
    key_file.write_text("\n")
    assert main(_test_args(endpoint, data, "--api-key-file", str(key_file))) == 1
    assert f"--api-key-file {key_file}: its first line is empty" in capsys.readouterr().err
    missing = tmp_path / "missing.key"
    assert main(_test_args(endpoint, data, "--api-key-file", str(missing))) == 1
    assert f"--api-key-file {missing}: no such file" in capsys.readouterr().err
    assert len(endpoint.standin.received) == 2
    with pytest.raises(SystemExit) as exit_:
        main(_test_args(endpoint, data, "--api-key", KEY, "--api-key-file", str(key_file)))
    assert exit_.value.code == 2
    assert "not allowed with argument --api-key" in capsys.readouterr().err


# ---------------------------------------------------------------------------- interactive


def test_interactive_pauses_at_each_chat_call(endpoint: Endpoint, tmp_path: Path) -> None:
    # Row 1 first (--row): show the tools and the messages at turn 1, go on, then run to the end
    # from turn 2; then pick row 0 and quit at its first pause; then end the session.
    script = "t\nm\nn\nc\n0\nq\nq\n"
    result = _cli(
        *_test_args(endpoint, _dataset(tmp_path), "-i", "--row", "1"),
        stdin=script,
        OPENAI_API_KEY=KEY,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index("=== row 1 ===") < out.index("=== row 0 ===")
    assert "user: What is 6 * 7?" in out
    assert "--- turn 1: model answer ---" in out
    assert "calculate({" in out and '"operation": "multiply"' in out
    assert "--- tools ---" in out and "square_root(x)" in out
    assert "--- messages ---" in out and "[1] user: What is 6 * 7?" in out
    assert "tool call_" in out  # the tool's result, shown before the next call
    assert "status: COMPLETED" in out and "reward: 1.0" in out
    assert "aborting this row" in out and "aborted by the user" in out
    assert "interactive session ended" in out
    assert KEY not in out + result.stderr
    assert len(endpoint.standin.received) == 3  # row 1: two turns; row 0: one


# ---------------------------------------------------------------------------- demo


def test_demo_against_an_endpoint_takes_the_test_path(endpoint: Endpoint) -> None:
    rows = sum(
        1
        for line in (REPO_ROOT / "examples/calculator/dataset.jsonl").read_text().splitlines()
        if line.strip()
    )
    result = _cli(
        "demo", "--base-url", endpoint.base_url, "--model", "gpt-5-mini", "--api-key", KEY
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(rf"^\s+COMPLETED\s+{rows}$", result.stdout, re.MULTILINE), result.stdout
    assert len(endpoint.standin.received) == 2 * rows
    assert KEY not in result.stdout + result.stderr


def test_demo_model_without_base_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "gpt-5-mini"]) == 2
    assert "--base-url" in capsys.readouterr().err


# ---------------------------------------------------------------------------- one report


def _shape(summary: str) -> list[str]:
    """The summary's lines with their figures taken out: what a line says, not its values."""
    body = summary.split("\n", 1)[1]  # after the title, which names the command
    figures = r"-?[0-9][0-9.,]*s?|(?<=\s)-(?=\s|$)"
    return [" ".join(re.sub(figures, "#", line).split()) for line in body.split("\n")]


def test_demo_and_test_print_one_summary_shape(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--store", "memory"]) == 0
    demo = capsys.readouterr().out
    assert main(_test_args(endpoint, _dataset(tmp_path), "--api-key", KEY)) == 0
    test = capsys.readouterr().out
    assert _shape(demo) == _shape(test), demo + test
    # One number format: every latency with one decimal, in both.
    for out in (demo, test):
        cells = re.search(r"^\s+init round trip((?:\s+\S+){3})$", out, re.MULTILINE)
        assert cells, out
        assert all(re.fullmatch(r"\d+\.\d", c) for c in cells.group(1).split()), out


def test_demo_reads_v1_rows_and_test_reads_the_demos(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One dataset reader: the demo takes test's v1 columns, test takes the demo's messages.
    assert main(["demo", "--store", "memory", "--dataset", str(_dataset(tmp_path))]) == 0
    assert re.search(r"^\s+COMPLETED\s+3$", capsys.readouterr().out, re.MULTILINE)
    demo_rows = str(REPO_ROOT / "examples/calculator/dataset.jsonl")
    argv = ["test", "-m", AGENT, "-d", demo_rows, "--limit", "2", "--api-key", KEY]
    code = main([*argv, "--base-url", endpoint.base_url])
    assert code == 0, capsys.readouterr()
    asked = {b["messages"][1]["content"] for b in endpoint.bodies()}
    assert asked == {"What is 43 + 4?", "What is 52 - 12?"}
