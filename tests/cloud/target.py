"""Where the cloud suite points, and how a check watches a rollout there.

One suite, two targets:

- **the local server** (``AWS_SAM_STACK_NAME`` not set, and always in ``make test``):
  ``rollout-sdk serve`` serving :mod:`tests.cloud.agents` on a free loopback port, with the
  TrainGate stand-in on another; nothing leaves 127.0.0.1 and nothing can reach AWS (the
  environment is fake-AWS before any boto3 client exists);
- **a deployed stack** (``AWS_SAM_STACK_NAME``, run by ``make test-cloud``): its ``ApiUrl`` and
  server key read from AWS (the stack's outputs through CloudFormation, the key from Secrets
  Manager), and a TrainGate stand-in the user runs where Lambda can reach it
  (``CLOUD_SUITE_TRAINGATE_URL``, with the stand-in's ``CLOUD_SUITE_CALLBACK_KEY``).

Either way a check sees the server only over HTTP (a base URL and its server key) and the
callbacks only through the stand-in's ``GET /standin/rollouts/{rollout_id}``, so what passes
locally is what runs against the stack.
"""

from __future__ import annotations

import ipaddress
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from testkit.aws import is_fake_aws
from testkit.bodies import calculator_body
from testkit.rigs import CALLBACK_KEY, SERVER_KEY, LocalRig
from testkit.wait import wait_until

STACK_VARIABLE = "AWS_SAM_STACK_NAME"
TRAINGATE_VARIABLE = "CLOUD_SUITE_TRAINGATE_URL"
CALLBACK_KEY_VARIABLE = "CLOUD_SUITE_CALLBACK_KEY"
#: How the local server serves the suite's agent (and a test stack must, for every check).
SUITE_AGENT = "tests.cloud.agents:agent_loop"
#: The template's default, for a stack whose parameters do not list it.
DEFAULT_WORKER_TIMEOUT = 900.0


class CloudSuiteUsageError(Exception):
    """The environment names a stack but not what the suite needs to test it."""


def requested_stack(environ: Mapping[str, str] = os.environ) -> str | None:
    """The stack this run tests, or None: the local server.

    None also when the stack name is set but this process is fake-AWS (``tests/conftest.py``
    made it so: the whole suite's run, where no test may reach AWS); ``make test-cloud`` runs
    the suite alone, with the shell's own credentials.
    """
    stack = environ.get(STACK_VARIABLE, "").strip()
    return stack if stack and not is_fake_aws(environ) else None


@dataclass
class Target:
    """A rollout server and the TrainGate stand-in it calls back.

    ``traingate_url`` is the stand-in as the server reaches it (every init's ``server_url``),
    and the suite reads it there too. ``worker_timeout`` is the Lambda worker's timeout (None:
    the local server, which has none). ``rig`` is the local server's (None on a stack): only
    there can a check kill and restart the server.
    """

    kind: str
    description: str
    base_url: str
    server_key: str
    traingate_url: str
    callback_key: str
    agent: str
    worker_timeout: float | None
    callback_within: float
    every: float
    rig: LocalRig | None = None

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.server_key}"},
            timeout=60.0,
        )
        self.traingate = httpx.Client(
            base_url=self.traingate_url,
            headers={"Authorization": f"Bearer {self.callback_key}"},
            timeout=30.0,
        )

    def close(self) -> None:
        self.http.close()
        self.traingate.close()

    # ------------------------------------------------------------------ requests

    @staticmethod
    def new_id(what: str) -> str:
        """A rollout id no earlier run used (a stack keeps its records for a day)."""
        return f"cloud-{what}-{uuid.uuid4().hex[:12]}"

    def body(self, rollout_id: str, **fields: Any) -> dict[str, Any]:
        """A calculator init for this target: its stand-in, its callback key."""
        return calculator_body(
            rollout_id, self.traingate_url, callback_key=self.callback_key, **fields
        )

    def init(self, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
        return self.http.post("/v1/rollout/init", json=body, **kwargs)

    def status(self, rollout_id: str) -> httpx.Response:
        return self.http.get(f"/v1/rollout/{rollout_id}")

    # ------------------------------------------------------------------ observing

    def observed(self, rollout_id: str) -> dict[str, Any]:
        """What the stand-in received for ``rollout_id`` (its ``GET /standin/rollouts/...``)."""
        answer = self.traingate.get(f"/standin/rollouts/{rollout_id}")
        answer.raise_for_status()
        seen: dict[str, Any] = answer.json()
        return seen

    def wait_reported(self, rollout_id: str, *, within: float | None = None) -> dict[str, Any]:
        """Until the stand-in has a final response for ``rollout_id``, then until the server
        says it is delivered (so nothing more will be sent); what the stand-in received."""
        within = self.callback_within if within is None else within
        seen: dict[str, Any] = {}

        def reported() -> bool:
            seen.update(self.observed(rollout_id))
            return bool(seen["completions"])

        wait_until(
            reported,
            within=within,
            every=self.every,
            what=f"a callback for {rollout_id} at {self.traingate_url}"
            + ("" if self.rig else " (is it reachable from Lambda?)"),
        )
        wait_until(
            lambda: self.status(rollout_id).json().get("delivered") is True,
            within=self.callback_within,
            every=self.every,
            what=f"{rollout_id} recorded as delivered",
        )
        return self.observed(rollout_id)

    def wait_chat(self, rollout_id: str) -> None:
        """Until the stand-in answered a chat call of ``rollout_id`` (its agent is running)."""
        wait_until(
            lambda: self.observed(rollout_id)["chat_calls"] > 0,
            within=self.callback_within,
            every=self.every,
            what=f"a chat call of {rollout_id}",
        )


def local_target(rig: LocalRig) -> Target:
    """The started ``rig`` as a target: everything on 127.0.0.1."""
    agent = httpx.get(f"{rig.url}/health", timeout=10).json()["agent_loop"]
    return Target(
        kind="local",
        description=f"the local server {rig.url} (rollout-sdk serve, SQLite) with the "
        f"TrainGate stand-in on {rig.traingate_url}",
        base_url=rig.url,
        server_key=SERVER_KEY,
        traingate_url=rig.traingate_url,
        callback_key=CALLBACK_KEY,
        agent=agent,
        worker_timeout=None,
        callback_within=30.0,
        every=0.05,
        rig=rig,
    )


def local_rig(name: str) -> LocalRig:
    """A local server serving the suite's agent, and its stand-in (not started)."""
    return LocalRig(env={}, name=name, agent=SUITE_AGENT)


def check_stand_in_url(environ: Mapping[str, str]) -> tuple[str, str]:
    """The stand-in's URL and callback key for a stack run; CloudSuiteUsageError when missing
    or when Lambda could never reach the URL."""
    url = environ.get(TRAINGATE_VARIABLE, "").strip().rstrip("/")
    key = environ.get(CALLBACK_KEY_VARIABLE, "").strip()
    if not url or not key:
        raise CloudSuiteUsageError(
            f"{STACK_VARIABLE} is set, so tests/cloud tests that stack; it also needs "
            f"{TRAINGATE_VARIABLE} (the URL of a TrainGate stand-in that Lambda can reach) and "
            f"{CALLBACK_KEY_VARIABLE} (the stand-in's STANDIN_CALLBACK_KEY): see docs/aws.md, "
            "'First deploy'"
        )
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise CloudSuiteUsageError(f"{TRAINGATE_VARIABLE} must be an http(s) URL, got {url!r}")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        raise CloudSuiteUsageError(
            f"{TRAINGATE_VARIABLE}={url} is this machine's loopback: Lambda cannot reach it. "
            "Run the stand-in on a host with a public address, or behind a tunnel "
            "(docs/aws.md, 'First deploy')"
        )
    return url, key


def stack_target(
    stack: str, environ: Mapping[str, str], say: Callable[[str], None], *, session: Any = None
) -> Target:
    """The deployed ``stack`` as a target, through ``session`` (a boto3 session; default: the
    shell's credentials and region). Says what it will contact before the first AWS call;
    CloudSuiteUsageError when the stack cannot be tested."""
    traingate_url, callback_key = check_stand_in_url(environ)
    from rollout_sdk.aws.secrets import parse_server_keys

    if session is None:
        import boto3

        session = boto3.Session()
    region = session.region_name
    if not region:
        raise CloudSuiteUsageError(
            "no AWS region: set AWS_DEFAULT_REGION (or a region in your profile) to the stack's"
        )
    say(
        f"contacting AWS: stack {stack!r} in {region}, profile {session.profile_name}: "
        "CloudFormation "
        "DescribeStacks (the outputs) and Secrets Manager GetSecretValue (the server key), "
        f"then rollouts over HTTPS to the stack's ApiUrl, called back at {traingate_url}"
    )
    # No stubs for CloudFormation in the dev extras; one call, typed here by hand.
    cloudformation: Any = session.client("cloudformation")
    found = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    account = str(found["StackId"]).split(":")[4]
    if not str(found["StackStatus"]).endswith("_COMPLETE") or "ROLLBACK" in found["StackStatus"]:
        raise CloudSuiteUsageError(f"stack {stack!r} is {found['StackStatus']}, not deployed")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue") for p in found.get("Parameters", [])}
    for name in ("ApiUrl", "ServerKeySecretArn"):
        if name not in outputs:
            raise CloudSuiteUsageError(f"stack {stack!r} has no output {name}: not this kit's?")
    secret = session.client("secretsmanager").get_secret_value(
        SecretId=outputs["ServerKeySecretArn"]
    )["SecretString"]
    base_url = outputs["ApiUrl"].rstrip("/")
    agent = httpx.get(f"{base_url}/health", timeout=30).json()["agent_loop"]
    worker_timeout = float(parameters.get("WorkerTimeout") or DEFAULT_WORKER_TIMEOUT)
    say(
        f"account {account}: {base_url} serves agent {agent!r} "
        f"(AgentLoop {parameters.get('AgentLoop')}, HandOff {parameters.get('HandOff')}, "
        f"WorkerTimeout {worker_timeout:g} s)"
    )
    return Target(
        kind="stack",
        description=f"stack {stack!r} ({base_url}, account {account}, {region})",
        base_url=base_url,
        server_key=parse_server_keys(secret)[0],
        traingate_url=traingate_url,
        callback_key=callback_key,
        agent=agent,
        worker_timeout=worker_timeout,
        # Cold starts of two functions, and each chat call through the stand-in's tunnel.
        callback_within=120.0,
        every=1.0,
    )
