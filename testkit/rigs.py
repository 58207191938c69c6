"""The rigs the reliability scenarios run on: ``rollout-sdk serve`` as a subprocess (SQLite)
with a TrainGate stand-in, and the Lambda handlers of ``handler.py`` on moto's server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Self, TypeVar
from urllib.parse import quote

import httpx

from rollout_sdk.testing.lifecycle import StartStop
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit import REPO_ROOT
from testkit.aws import fake_aws_env
from testkit.bodies import calculator_body
from testkit.processes import HTTPSubprocess, ServerProcess
from testkit.scenarios.base import Scale, ScenarioError

T = TypeVar("T")

#: The suite's agent: the calculator with a run id per run, or a slow multi-turn loop.
AGENT = "testkit.agents:agent_loop"
SERVER_KEY = "reliability-server-key"
AUTH = {"Authorization": f"Bearer {SERVER_KEY}"}
CALLBACK_KEY = "reliability-callback-key"
#: What events/init.json sends, and so what the AWS rig stores as the server key.
AWS_SERVER_KEY = "local-server-key"
EVENTS = REPO_ROOT / "events"
TEMPLATE = REPO_ROOT / "template.yaml"


def isolated_env(settings: dict[str, str]) -> dict[str, str]:
    """A child's environment: this one's, fake-AWS, without any outer ``OSMOSIS_ROLLOUT_*`` or
    ``ROLLOUT_SDK_*`` setting, plus ``settings``."""
    return fake_aws_env(settings, clean=True)


def client_env(timeout: float) -> dict[str, str]:
    """Fast retries and a small client timeout, so faults cost little time."""
    return {
        "OSMOSIS_ROLLOUT_CLIENT_TIMEOUT_SECONDS": f"{timeout:g}",
        "OSMOSIS_ROLLOUT_CLIENT_RETRY_BASE_DELAY": "0.05",
        "OSMOSIS_ROLLOUT_CLIENT_RETRY_MAX_DELAY": "0.5",
    }


def fault_env(scale: Scale) -> dict[str, str]:
    """The fault-mix server: small client timeout, re-drive every second."""
    return {
        **client_env(scale.client_timeout),
        "ROLLOUT_SDK_REDRIVE_INTERVAL_SECONDS": "1",
        "OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS": "100",
    }


def control_env(scale: Scale) -> dict[str, str]:
    """The cancel and backpressure server: a few running, a few queued, then 429."""
    return {
        **client_env(10.0),
        "OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS": str(scale.control_running),
        "ROLLOUT_SDK_MAX_QUEUED_ROLLOUTS": str(scale.control_queued),
        "ROLLOUT_SDK_RETRY_AFTER_SECONDS": "1",
        "ROLLOUT_SDK_REDRIVE_INTERVAL_SECONDS": "1",
        "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS": f"{LOCAL_REQUEST_TIMEOUT:g}",
    }


#: The control rig's rollout deadline: past it, a rollout ends as ERROR "timeout".
LOCAL_REQUEST_TIMEOUT = 4.0


class LocalRig(StartStop):
    """A ``rollout-sdk serve`` subprocess (SQLite, in a fresh state folder; or with
    ``store="dynamodb"``, DynamoDB on a moto server of the rig's own, which outlives the
    server's kills, through ``--dynamodb-endpoint``) serving the suite's agent (or ``agent``,
    as ``module:attribute``), and a TrainGate
    stand-in on another loopback port. ``kill`` and ``restart`` run the same command again in the
    same folder, on the same port."""

    def __init__(
        self,
        *,
        env: dict[str, str],
        name: str = "rig",
        keep_chat: bool = False,
        store: str = "sqlite",
        agent: str = AGENT,
    ) -> None:
        self.env = env
        self.name = name
        self.store = store
        self.agent = agent
        self.emulator: Any = None
        self.standin = TrainGateStandIn(callback_key=CALLBACK_KEY)
        #: Log chat bodies too (what a timed-out rollout's conversation is checked against).
        self.standin.keep_chat_bodies = keep_chat
        self.traingate = ServerThread(self.standin.app, timeout_graceful_shutdown=1)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.state_dir = Path()
        self.server: HTTPSubprocess | None = None
        self.restarts = 0
        self.init_retries: Counter[str] = Counter()

    @property
    def url(self) -> str:
        if self.server is None:
            raise ScenarioError("the rig is not started")
        return self.server.url

    @property
    def traingate_url(self) -> str:
        return self.traingate.url

    def start(self) -> Self:
        self._tmp = tempfile.TemporaryDirectory(prefix=f"rollout-sdk-{self.name}-")
        self.state_dir = Path(self._tmp.name)
        try:
            self.traingate.start()
            extra: list[str] = []
            if self.store == "dynamodb":
                from rollout_sdk.local.emulator import EmbeddedMoto

                self.emulator = EmbeddedMoto().start()
                extra = ["--dynamodb-endpoint", self.emulator.endpoint_url]
            self.server = ServerProcess(
                agent=self.agent,
                store=self.store,
                state_dir=self.state_dir,
                server_key=SERVER_KEY,
                env=self.env,
                log_level="warning",
                extra_args=extra,
            )
            self.server.env = isolated_env({**self.env, "ROLLOUT_SDK_SERVER_KEY": SERVER_KEY})
            self.server.start(timeout=60)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL the server: no shutdown, no cleanup, the lock released by the OS."""
        server = self.server
        if server is None or server.process is None:
            raise ScenarioError("no server to kill")
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        server.stop()

    def restart(self) -> None:
        """Start the same command again, in the same folder (the restart sweep runs first)."""
        old = self.server
        if old is None:
            raise ScenarioError("no server to restart")
        self.restarts += 1
        self.server = HTTPSubprocess(
            old.argv,
            url=old.url,
            log_path=self.state_dir / f"server-restart-{self.restarts}.log",
            env=old.env,
            cwd=old.cwd,
        )
        self.server.start(timeout=60)

    async def post_init(self, client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
        """POST an init as TrainGate does: the same init again when the connection fails
        (at most 5 times); ``init_retries`` counts them by rollout id."""
        for attempt in range(5):
            try:
                return await client.post("/v1/rollout/init", json=body)
            except httpx.TransportError:
                if attempt == 4:
                    raise
                self.init_retries[str(body.get("rollout_id"))] += 1
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    async def init_accepted(self, client: httpx.AsyncClient, body: dict[str, Any]) -> bool:
        """:meth:`post_init`; whether the server accepted the init (202)."""
        return (await self.post_init(client, body)).status_code == 202

    def client(self, connections: int = 64) -> httpx.AsyncClient:
        """An HTTP client for the server, with its key."""
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(base_url=self.url, headers=AUTH, timeout=60.0, limits=limits)

    def log_tail(self) -> str:
        return self.server.log_tail() if self.server is not None else "(no server)"

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.server.stop()
        finally:
            self.standin.release()
            self.traingate.stop()
            if self.emulator is not None:
                self.emulator.stop()
                self.emulator = None
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


def rollout_body(rollout_id: str, server_url: str, **fields: Any) -> dict[str, Any]:
    """A calculator init body for the suite's agent, calling TrainGate back with
    ``CALLBACK_KEY`` (``fields`` as :func:`testkit.bodies.calculator_body` takes them)."""
    return calculator_body(rollout_id, server_url, callback_key=CALLBACK_KEY, **fields)


def slow(turns: int, turn_delay: float) -> dict[str, Any]:
    """Metadata of a slow rollout (see :mod:`testkit.agents`)."""
    return {"slow": {"turns": turns, "turn_delay": turn_delay}}


def path_of(rollout_id: str) -> str:
    return f"/v1/rollout/{quote(rollout_id, safe='')}"


async def record_of(client: httpx.AsyncClient, rollout_id: str) -> dict[str, Any] | None:
    """The server's record of ``rollout_id`` (GET /v1/rollout/{id}); None on 404. A connection
    the server closed as it was reused (keep-alive) is tried again, a few times."""
    for attempt in range(5):
        try:
            response = await client.get(path_of(rollout_id))
            break
        except httpx.TransportError:
            if attempt == 4:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    if response.status_code == 404:
        return None
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


async def records_of(
    client: httpx.AsyncClient, rollout_ids: Sequence[str], *, parallel: int = 32
) -> dict[str, dict[str, Any] | None]:
    """Records of many rollouts, ``parallel`` requests at a time."""
    slots = asyncio.Semaphore(parallel)

    async def one(rollout_id: str) -> tuple[str, dict[str, Any] | None]:
        async with slots:
            return rollout_id, await record_of(client, rollout_id)

    return dict(await asyncio.gather(*(one(r) for r in rollout_ids)))


AWS_SETTINGS = {
    **client_env(30.0),
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    "DEADLINE_MARGIN_SECONDS": "1",
    "ROLLOUT_SDK_LEASE_SECONDS": "5",
    "ROLLOUT_SDK_HEARTBEAT_SECONDS": "1",
    "ROLLOUT_SDK_REDRIVE_INTERVAL_SECONDS": "1",
}


class LambdaProcess:
    """One Lambda execution environment as a process: ``handler.py`` imported afresh, one
    invocation, its result written to a file. ``kill`` is a crash."""

    def __init__(self, env: dict[str, str], function: str, event: Any, *, timeout: float) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="rollout-sdk-lambda-")
        folder = Path(self._dir.name)
        (folder / "event.json").write_text(json.dumps(event), encoding="utf-8")
        self._out = folder / "result.json"
        self._log: IO[bytes] = (folder / "log.txt").open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed argv, no shell
            [
                sys.executable,
                "-m",
                "testkit.lambda_process",
                str(folder / "event.json"),
                function,
                f"{timeout:g}",
                str(self._out),
            ],
            cwd=REPO_ROOT,
            env=isolated_env(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        """SIGKILL: the environment dies mid-invocation."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def result(self, timeout: float) -> dict[str, Any]:
        """The handler's return value; ScenarioError when it failed or took too long."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            self.kill()
            raise ScenarioError(f"the Lambda process took over {timeout:g} s") from exc
        if self.process.returncode != 0 or not self._out.exists():
            self._log.flush()
            log = (Path(self._dir.name) / "log.txt").read_text(errors="replace")[-2000:]
            raise ScenarioError(f"the Lambda process failed ({self.process.returncode}): {log}")
        data: dict[str, Any] = json.loads(self._out.read_text(encoding="utf-8"))
        return data

    def close(self) -> None:
        self.kill()
        self._log.close()
        self._dir.cleanup()


class AwsRig(StartStop):
    """The AWS path on one machine: moto's server on 127.0.0.1 provisioned from template.yaml,
    ``handler.py`` imported ``environments`` times (each import is an execution environment
    with its own event loop, clients and thread), Lambda processes for crashes, and a TrainGate
    stand-in. ``endpoint`` reuses a running moto server (the tests' session one)."""

    def __init__(
        self, *, endpoint: str | None = None, prefix: str = "reliability", environments: int = 3
    ) -> None:
        self.endpoint = endpoint
        self.prefix = prefix
        self.size = environments
        self.standin = TrainGateStandIn(callback_key=CALLBACK_KEY)
        self.standin.keep_chat_bodies = True
        self.traingate = ServerThread(self.standin.app, timeout_graceful_shutdown=1)
        self.env: dict[str, str] = {}
        self.modules: list[Any] = []
        self.pools: list[ThreadPoolExecutor] = []
        self._moto: Any = None
        self._environ: dict[str, str] | None = None
        self._sys_path: list[str] = []
        self._processes: list[LambdaProcess] = []

    @property
    def traingate_url(self) -> str:
        return self.traingate.url

    def start(self) -> Self:
        from rollout_sdk.local.emulator import EmbeddedMoto, load_template, provision
        from rollout_sdk.local.invoke import function_environment, import_handler
        from rollout_sdk.testing.standin import LOOPBACK_TRAINGATE

        self._environ = dict(os.environ)
        self._sys_path = list(sys.path)
        try:
            if self.endpoint is None:
                self._moto = EmbeddedMoto().start()
                self.endpoint = self._moto.endpoint_url
            resources = provision(
                self.endpoint,
                template_path=TEMPLATE,
                agent_loop=AGENT,
                server_key=AWS_SERVER_KEY,
                prefix=self.prefix,
            )
            template = load_template(TEMPLATE)
            self.env = {
                **function_environment(template, "ApiFunction", resources, LOOPBACK_TRAINGATE),
                **AWS_SETTINGS,
            }
            if str(REPO_ROOT) not in sys.path:
                sys.path.insert(0, str(REPO_ROOT))
            from rollout_sdk.aws.handlers.api import adapter_for

            for _ in range(self.size):
                module = import_handler(self.env)
                runtime = module.runtime
                # Build every lazy piece now, one environment at a time: boto3's default session
                # is not safe to build clients from in several threads at once.
                for client in ("dynamodb", "s3", "lambda_", "kms", "secretsmanager"):
                    getattr(runtime.clients, client)
                adapter_for(runtime)  # builds the app and its adapter
                runtime.worker  # noqa: B018
                self.modules.append(module)
                self.pools.append(
                    ThreadPoolExecutor(
                        1, initializer=asyncio.set_event_loop, initargs=(runtime.loop,)
                    )
                )
            self.traingate.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for process in self._processes:
            process.close()
        self._processes.clear()
        for pool in self.pools:
            pool.shutdown(wait=True, cancel_futures=True)
        self.pools.clear()
        for module in self.modules:
            module.runtime.close()
        self.modules.clear()
        sys.modules.pop("handler", None)
        self.standin.release()
        self.traingate.stop()
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if self._environ is not None:
            os.environ.clear()
            os.environ.update(self._environ)
            self._environ = None
        if self._sys_path:
            sys.path[:] = self._sys_path

    # ------------------------------------------------------------------ calls

    def submit(self, index: int, call: Callable[[Any], T]) -> Future[T]:
        """Run ``call(handler_module)`` in environment ``index``'s own thread."""
        module = self.modules[index % len(self.modules)]
        return self.pools[index % len(self.pools)].submit(call, module)

    def run(self, index: int, call: Callable[[Any], T], timeout: float = 120.0) -> T:
        """:meth:`submit` and wait."""
        return self.submit(index, call).result(timeout)

    def init(self, body: dict[str, Any], *, env: int = 0) -> tuple[int, str, list[Any]]:
        """POST the init through the API function: (status, body, worker events dispatched)."""
        return self.run(env, init_call(body))

    def worker(self, event: Any, *, env: int = 0, timeout: float = 900.0) -> Future[Any]:
        """Deliver a worker event in environment ``env`` (a Lambda context of ``timeout`` s)."""
        from rollout_sdk.local.invoke import LocalLambdaContext

        def call(module: Any) -> Any:
            return module.worker(event, LocalLambdaContext("WorkerFunction", timeout))

        return self.submit(env, call)

    def failed(self, event: Any, *, env: int = 0) -> Future[Any]:
        """The on-failure destination record, to ``handler.worker_failed``."""
        from rollout_sdk.local.invoke import LocalLambdaContext

        def call(module: Any) -> Any:
            return module.worker_failed(event, LocalLambdaContext("WorkerFailureFunction", 300))

        return self.submit(env, call)

    def redrive(self, *, env: int = 0) -> Future[Any]:
        """The scheduled re-drive, to ``handler.redrive``."""
        from rollout_sdk.local.invoke import LocalLambdaContext, load_event

        event = load_event(EVENTS / "redrive.json")

        def call(module: Any) -> Any:
            return module.redrive(event, LocalLambdaContext("RedriveFunction", 600))

        return self.submit(env, call)

    def record(self, rollout_id: str) -> Any:
        """The rollout's record in DynamoDB (None when absent)."""

        def call(module: Any) -> Any:
            runtime = module.runtime
            return runtime.loop.run_until_complete(runtime.store.get(rollout_id, now=time.time()))

        return self.run(0, call)

    def process(self, function: str, event: Any, *, timeout: float = 900.0) -> LambdaProcess:
        """A fresh execution environment in its own process, running one invocation."""
        started = LambdaProcess(self.env, function, event, timeout=timeout)
        self._processes.append(started)
        return started


def failure_record(event: Any, condition: str = "RetriesExhausted") -> Any:
    """What Lambda sends the on-failure destination for ``event`` (events/worker-failure.json)."""
    from rollout_sdk.local.invoke import load_event

    record = load_event(EVENTS / "worker-failure.json")
    record["requestPayload"] = event
    record["requestContext"]["condition"] = condition
    record["responsePayload"] = {
        "errorType": "Runtime.ExitError",
        "errorMessage": "RequestId: 1 Error: Runtime exited with error: signal: killed",
    }
    return record


def init_call(body: dict[str, Any]) -> Callable[[Any], tuple[int, str, list[Any]]]:
    from rollout_sdk.local.invoke import invoke, load_event

    event = load_event(EVENTS / "init.json")
    event["body"] = json.dumps(body)

    def call(module: Any) -> tuple[int, str, list[Any]]:
        done = invoke(module, "ApiFunction", event, timeout_seconds=29)
        return int(done.result["statusCode"]), str(done.result["body"]), done.dispatched

    return call
