"""The osmosis-ai 0.3.8 suite's rig: a model endpoint (OpenAI's chat shape, the standard
library's HTTP server on 127.0.0.1) for the workflows to call, and the kit's own server,
``rollout-sdk serve --workflow ...``, run from the kit's environment (``KIT_PYTHON``, which
``make test-osmosis03`` sets) as a user runs it, on a port of its own and a state folder of
the test's. Each test drives it with osmosis-ai 0.3.8's own ``RolloutClient``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
KIT_PYTHON = os.environ.get("KIT_PYTHON", str(REPO / ".venv" / "bin" / "python"))
SERVER_KEY = "osmosis03-suite-server-key"
LLM_KEY = "osmosis03-suite-llm-key"
WORKFLOW = "tests.osmosis03.workflows:Scripted"
GRADER = "tests.osmosis03.workflows:ScriptedGrader"


@dataclass
class Model:
    """The model endpoint: answers ``the answer is <last user message>``; keeps each call."""

    url: str
    calls: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def model() -> Iterator[Model]:
    calls: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
            last = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
            answer = {
                "id": f"c-{len(calls)}",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"the answer is {last}"},
                        "finish_reason": "stop",
                    }
                ],
            }
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Model(f"http://127.0.0.1:{httpd.server_address[1]}/v1", calls)
    finally:
        httpd.shutdown()
        httpd.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """One ``rollout-sdk serve`` process; :meth:`restart` kills it and starts it again on the
    same port and state folder."""

    args: list[str]
    env: dict[str, str]
    port: int
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    #: The kit's command that serves: ``serve``, or ``start-api`` (the Lambda path).
    command: str = "serve"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        assert self.log is not None
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [KIT_PYTHON, "-m", "rollout_sdk", self.command, *self.args, "--port", str(self.port)],
            cwd=REPO,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        self._ready()
        return self

    def _ready(self, within: float = 90.0) -> None:
        """Until the server answers /health (its start-up lines go to the log)."""
        ends = time.monotonic() + within
        while time.monotonic() < ends:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # a start-up probe, bounded by ``within``
        raise AssertionError(f"the server did not start within {within} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: nothing of the server runs after it (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> Server:
        self.kill()
        return self.start()


def _kit_env() -> dict[str, str]:
    """The kit's processes' environment: this one's, without the variables either side reads
    (the kit's settings, AWS's, a virtual environment's), the repository importable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OSMOSIS_", "ROLLOUT_SDK_", "VIRTUAL_ENV", "PYTHON", "AWS_"))
    }
    env["PYTHONPATH"] = str(REPO)
    return env


@contextmanager
def _stopped_at_the_end(started: list[Server]) -> Iterator[None]:
    """Stop every server started; print their output when the test failed."""
    try:
        yield
    finally:
        for server in started:
            server.stop()
        if sys.exc_info()[0] is not None:
            for server in started:
                print(server.output())


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``serve(*extra_args, grader=True, **settings)``: the kit's server with the suite's
    workflow (and grader), its server key, its state in the test's folder; ``settings`` are
    environment variables (``ROLLOUT_SDK_OSMOSIS03_POLLING_LEASE_SECONDS=4``)."""
    started: list[Server] = []

    def start(*extra: str, grader: bool = True, **settings: Any) -> Server:
        env = _kit_env()
        env.update({k: str(v) for k, v in settings.items()})
        args = ["--workflow", WORKFLOW, *(["--grader", GRADER] if grader else [])]
        args += ["--api-key", SERVER_KEY, "--state-dir", str(tmp_path / "state"), *extra]
        server = Server(args, env, free_port(), log=tmp_path / f"server-{len(started)}.log")
        started.append(server)
        return server.start()

    with _stopped_at_the_end(started):
        yield start


@pytest.fixture
def start_api(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``start_api(**variables)``: ``rollout-sdk start-api`` serving handler.py's API function
    as deployed with the suite's Workflow and Grader, over its embedded AWS emulator, the
    re-drive every second; ``variables`` go to every function's environment (``--env-vars``),
    over the template's (``ROLLOUT_SDK_OSMOSIS03_RESULT_WAIT_SECONDS`` is 20 there)."""
    started: list[Server] = []

    def start(**variables: Any) -> Server:
        env = _kit_env()
        args = [
            "--parameter-overrides",
            f"Workflow={WORKFLOW}",
            f"Grader={GRADER}",
            "--allowed-server-hosts",
            "127.0.0.1",
            "--server-key",
            SERVER_KEY,
            "--redrive-every",
            "1",
        ]
        if variables:
            env_vars = tmp_path / f"env-{len(started)}.json"
            env_vars.write_text(
                json.dumps({"Parameters": {k: str(v) for k, v in variables.items()}})
            )
            args += ["--env-vars", str(env_vars)]
        server = Server(
            args,
            env,
            free_port(),
            log=tmp_path / f"start-api-{len(started)}.log",
            command="start-api",
        )
        started.append(server)
        return server.start()

    with _stopped_at_the_end(started):
        yield start
