"""Servers as subprocesses on loopback: any command answering a health path, and
``rollout-sdk serve`` on a free port with its state in a folder."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Self

import httpx

from rollout_sdk.testing.lifecycle import StartStop
from rollout_sdk.testing.threads import free_port
from testkit import REPO_ROOT
from testkit.aws import fake_aws_env

DEFAULT_AGENT = "examples.calculator.agent:agent_loop"


def default_server_cmd() -> list[str]:
    """The ``rollout-sdk`` script beside this interpreter, else ``python -m rollout_sdk``."""
    script = Path(sys.executable).with_name("rollout-sdk")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rollout_sdk"]


class ServerStartError(RuntimeError):
    """The server subprocess exited or did not answer /health in time (message has its log)."""


class HTTPSubprocess(StartStop):
    """A server subprocess answering ``GET {url}{health_path}``, until ``stop``.

    ``with HTTPSubprocess(argv, ...) as server: server.url`` — stopped (terminate, then kill)
    on exit. Its output goes to ``log_path``, so a full pipe can never block it.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        url: str,
        log_path: str | Path,
        env: dict[str, str] | None = None,
        cwd: str | Path = REPO_ROOT,
        health_path: str = "/health",
    ) -> None:
        self.argv = argv
        self.url = url
        self.log_path = Path(log_path)
        self.env = fake_aws_env(env)
        self.cwd = Path(cwd)
        self.health_path = health_path
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Self:
        """Start and wait for the health path to answer 200; ServerStartError otherwise."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed argv list, no shell
            self.argv, cwd=self.cwd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self.process.poll() is not None:
                    self.stop()
                    raise ServerStartError(
                        f"{shlex.join(self.argv)} exited with {self.process.returncode}:\n"
                        f"{self.log_tail()}"
                    )
                try:
                    if client.get(self.url + self.health_path).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerStartError(
                        f"{shlex.join(self.argv)} did not answer {self.health_path} within "
                        f"{timeout:g} s:\n{self.log_tail()}"
                    )
                time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """Terminate, then kill after ``timeout``; returns the exit code (None if never started)."""
        code: int | None = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
            code = self.process.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the server printed."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class ServerProcess(HTTPSubprocess):
    """``rollout-sdk serve`` on a free loopback port with its state in ``state_dir``."""

    def __init__(
        self,
        *,
        agent: str = DEFAULT_AGENT,
        store: str = "sqlite",
        state_dir: str | Path,
        server_cmd: list[str] | None = None,
        server_key: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | Path = REPO_ROOT,
        log_level: str = "warning",
        extra_args: Sequence[str] = (),
    ) -> None:
        port = free_port()
        argv = [
            *(server_cmd or default_server_cmd()),
            "serve",
            "--agent",
            agent,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--store",
            store,
            "--state-dir",
            str(state_dir),
            "--log-level",
            log_level,
            *extra_args,
        ]
        # The key goes through the environment, not argv, so `ps` does not show it.
        extra = {"ROLLOUT_SDK_SERVER_KEY": server_key} if server_key else {}
        super().__init__(
            argv,
            url=f"http://127.0.0.1:{port}",
            log_path=Path(state_dir) / "server.log",
            env={**extra, **(env or {})},
            cwd=cwd,
        )
        self.port = port
        self.server_key = server_key
