"""``rollout-sdk register``: check a deployed server, then register its URL with the platform.

What is sent (protocol.md section 7a): ``POST {platform}/api/cli/rollout-server/register`` with
``Authorization: Bearer <platform token>``, ``X-Osmosis-Org: <workspace>`` when one is given, and
the JSON body ``{"host", "port", "agent_loop_name", "api_key"}``. The platform's API knows only a
host and a port, so for ``https://abc.execute-api.us-east-1.amazonaws.com`` the kit sends
``host = "abc.execute-api.us-east-1.amazonaws.com"`` and ``port = 443``. A URL with a path (a
stage or base path) cannot be expressed that way and is refused with a message; the template's
HTTP API uses the ``$default`` stage, whose URL has no path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from rollout_sdk.errors import RegisterError
from rollout_sdk.hosts import redact_url
from rollout_sdk.protocol import PROTOCOL_NAMES
from rollout_sdk.settings import DEFAULT_PLATFORM_URL

REGISTER_PATH = "/api/cli/rollout-server/register"
PLATFORM_TIMEOUT_SECONDS = 15.0


def mask(secret: str | None) -> str:
    """A secret shown as its first and last two characters."""
    if not secret:
        return "(none)"
    if len(secret) <= 8:
        return "*" * len(secret)
    return f"{secret[:2]}{'*' * (len(secret) - 4)}{secret[-2:]}"


@dataclass(frozen=True)
class Target:
    """Where the server is, as the platform's register API wants it."""

    base_url: str
    host: str
    port: int


def parse_target(url: str) -> Target:
    """Split an API URL into host and port; RegisterError for what the platform cannot take."""
    parts = urlsplit(url.strip())
    shown = redact_url(url)
    if "@" in parts.netloc:
        # The platform registers a host and a port; a key in the URL would only be printed.
        raise RegisterError(
            f"--url {shown!r} has user info: register the bare API URL; the server key goes "
            "in --api-key or ROLLOUT_SDK_SERVER_KEY"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RegisterError(f"--url must be an http(s) URL with a host, got {shown!r}")
    if parts.path.strip("/"):
        raise RegisterError(
            f"--url {shown!r} has a path ({parts.path}); the platform registers a host and a port "
            "only. Use the ApiUrl output of the stack (HTTP API, $default stage, no path) or a "
            "custom domain without a base path."
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Target(f"{parts.scheme}://{parts.netloc}", parts.hostname, port)


def check_health(target: Target, server_key: str, *, client: httpx.Client) -> dict[str, Any]:
    """``GET {url}/platform/health`` with the server key; its JSON body, or RegisterError."""
    url = f"{target.base_url}/platform/health"
    try:
        answer = client.get(url, headers={"Authorization": f"Bearer {server_key}"})
    except httpx.HTTPError as exc:
        raise RegisterError(f"cannot reach {url}: {exc}") from exc
    if answer.status_code == 401:
        raise RegisterError(f"{url} refused the server key (401): check --api-key")
    if answer.status_code == 404:
        raise RegisterError(
            f"{url} answered 404: the server has no server key configured, or this is not a "
            "rollout server"
        )
    if answer.status_code != 200:
        raise RegisterError(f"{url} answered {answer.status_code}: {answer.text[:300]}")
    try:
        body: dict[str, Any] = answer.json()
    except ValueError as exc:
        raise RegisterError(f"{url} did not answer JSON") from exc
    if body.get("status") != "healthy" or not body.get("agent_loop"):
        raise RegisterError(f"{url} is not healthy: {body}")
    return body


def served(health: dict[str, Any]) -> str:
    """The wires ``health`` (a ``/health`` body) says its server answers, in words."""
    protocols = health.get("protocols")
    if protocols is None:  # a server from before the field: v1 only
        return "v1 (POST /v1/rollout/init)"
    parts = []
    if PROTOCOL_NAMES["v1"] in protocols:
        parts.append(f"v1 (POST /v1/rollout/init, agent loop {health.get('agent_loop')!r})")
    if PROTOCOL_NAMES["osmosis03"] in protocols:
        grader = health.get("grader")
        parts.append(
            f"osmosis-ai 0.3.8 (POST /rollout, workflow {health.get('workflow')!r}"
            + (f", grader {grader!r})" if grader else ", no grader)")
        )
    return " and ".join(parts) or "nothing"


def register(
    *,
    url: str,
    server_key: str,
    platform_token: str,
    platform_url: str = DEFAULT_PLATFORM_URL,
    workspace: str | None = None,
    transport: httpx.BaseTransport | None = None,
    echo: Any = print,
) -> dict[str, Any]:
    """Check the server, register it, and return the platform's answer. Raises RegisterError."""
    if not server_key:
        raise RegisterError("a server key is needed: --api-key KEY or ROLLOUT_SDK_SERVER_KEY")
    if not platform_token:
        raise RegisterError("a platform token is needed: --token TOKEN or OSMOSIS_PLATFORM_TOKEN")
    target = parse_target(url)
    with httpx.Client(timeout=PLATFORM_TIMEOUT_SECONDS, transport=transport) as client:
        echo(f"checking GET {target.base_url}/platform/health (server key {mask(server_key)})")
        health = check_health(target, server_key, client=client)
        echo(f"  healthy: agent loop {health['agent_loop']!r}")
        echo(f"  serves: {served(health)}")
        if "protocols" in health and PROTOCOL_NAMES["v1"] not in health["protocols"]:
            raise RegisterError(
                f"{target.base_url} serves osmosis-ai 0.3.8 only ({served(health)}); the "
                "platform registers v1 rollout servers, which TrainGate calls at "
                "/v1/rollout/init. Point your 0.3.8 trainer's RolloutClient at "
                f"{target.base_url} instead, or deploy an AgentLoop beside the Workflow to "
                "register it"
            )
        endpoint = platform_url.rstrip("/") + REGISTER_PATH
        headers = {"Authorization": f"Bearer {platform_token}"}
        if workspace:
            headers["X-Osmosis-Org"] = workspace
        body = {
            "host": target.host,
            "port": target.port,
            "agent_loop_name": health["agent_loop"],
            "api_key": server_key,
        }
        shown_headers = {**headers, "Authorization": f"Bearer {mask(platform_token)}"}
        echo(f"sending POST {endpoint}")
        echo(f"  headers: {json.dumps(shown_headers)}")
        echo(f"  body: {json.dumps({**body, 'api_key': mask(server_key)})}")
        try:
            answer = client.post(endpoint, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise RegisterError(f"cannot reach the platform at {endpoint}: {exc}") from exc
    if answer.status_code in (401, 403):
        raise RegisterError(
            f"the platform refused the token ({answer.status_code}): check --token / --workspace"
        )
    if not 200 <= answer.status_code < 300:
        raise RegisterError(f"the platform answered {answer.status_code}: {answer.text[:300]}")
    try:
        result: dict[str, Any] = answer.json()
    except ValueError as exc:
        raise RegisterError("the platform did not answer JSON") from exc
    return result
