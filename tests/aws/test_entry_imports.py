"""Each Lambda entry point loads only what its function runs: in a fresh process, ``import
handler`` as Lambda runs it (``_HANDLER`` naming the entry point) must not load what another
function or the local tooling needs, and the API's first request must not load the TrainGate
client's HTTP stack (the API hands rollouts off; only the worker calls TrainGate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.aws import fake_aws_env
from testkit.imports import ImportProbe, probe_import

ROOT = Path(__file__).resolve().parents[2]
#: The TrainGate client's HTTP stack, whichever it is: the worker's alone.
HTTP_CLIENT = ("httpx", "httpcore", "h11", "aiohttp", "httpx_aiohttp", "httpx2")
#: Never on Lambda (bench/package.py checks the artifact ships none of it).
LOCAL = ("rollout_sdk.local", "rollout_sdk.testing", "sqlite3", "uvicorn", "prometheus_client")
#: What the API function's app must not load at its cold start (the API's and the poll's).
NOT_IN_THE_API = (
    *HTTP_CLIENT,
    *LOCAL,
    "rollout_sdk.engine.worker",
    "rollout_sdk.traingate.client",
    "rollout_sdk.engine.assembly",
    "rollout_sdk.aws.handlers.worker",
    "rollout_sdk.aws.handlers.queue",
    "rollout_sdk.aws.handlers.dead_letter",
    "rollout_sdk.aws.handlers.failure",
    "rollout_sdk.aws.handlers.redrive",
    "rollout_sdk.dispatch.sqs",
    "aws_xray_sdk",
)
#: What ``import handler`` must not load, per entry point.
NOT_AT_IMPORT = {
    "api": NOT_IN_THE_API,
    # The poll function is the API's app on a function of its own: the same rules.
    "poll": NOT_IN_THE_API,
    "worker": (
        *HTTP_CLIENT,  # on the first chat call, not at import
        *LOCAL,
        "fastapi",
        "starlette",
        "mangum",
        "rollout_sdk.http",
        "rollout_sdk.aws.handlers.api",
        "rollout_sdk.aws.handlers.queue",
        "rollout_sdk.aws.handlers.dead_letter",
        "rollout_sdk.dispatch.sqs",
        "aws_lambda_powertools.utilities.parameters",
        "aws_xray_sdk",
    ),
}
#: What the API's first request (a health check, AWS unreachable) must not load.
NOT_AFTER_API_REQUEST = (*HTTP_CLIENT, *LOCAL, "rollout_sdk.dispatch.sqs")
_CONTEXT = """
import json, types, handler
context = types.SimpleNamespace(function_name="f", function_version="1", memory_limit_in_mb=1024,
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:f",
    aws_request_id="req-1", get_remaining_time_in_millis=lambda: 30000)
answer = handler.api(json.loads({event!r}), context)
assert answer["statusCode"] == 200, answer
"""


def _fresh(
    entry: str, statement: str, variables: dict[str, str] | None = None, *, ok: bool = True
) -> ImportProbe:
    env = fake_aws_env(
        {
            "_HANDLER": f"handler.{entry}",
            "AGENT_LOOP": "examples.calculator.agent:agent_loop",
            "TABLE_NAME": "t",
            "WORKER_FUNCTION_NAME": "worker",
            "PYTHONPATH": str(ROOT),
            "LAMBDA_TASK_ROOT": str(ROOT),
            "POWERTOOLS_TRACE_DISABLED": "true",
            # Nothing answers here: a call to AWS fails at once, never leaving the machine.
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_MAX_ATTEMPTS": "1",
            **(variables or {}),
        },
        clean=True,
    )
    probe = probe_import(statement, env=env, cwd=ROOT, timeout=120)
    assert probe.ok is ok, probe.error
    return probe


@pytest.mark.parametrize("entry", sorted(NOT_AT_IMPORT))
def test_an_entry_point_imports_only_its_own_function(entry: str) -> None:
    probe = _fresh(entry, "import handler")
    assert probe.loaded([f"rollout_sdk.aws.handlers.{entry}"])  # its own, at the cold start
    assert probe.loaded(NOT_AT_IMPORT[entry]) == []


def test_the_api_s_first_request_loads_no_http_client() -> None:
    event = (ROOT / "events" / "health.json").read_text(encoding="utf-8")
    probe = _fresh("api", _CONTEXT.format(event=event))
    assert probe.loaded(["fastapi", "mangum"])  # the request did go through the app
    assert probe.loaded(NOT_AFTER_API_REQUEST) == []


#: A chat call through the TrainGate client's default transport, to a one-answer server on
#: 127.0.0.1 in the same process.
_CHAT = """
import asyncio, json
from rollout_sdk.traingate.client import TrainGateClient

BODY = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"},
    "finish_reason": "stop"}]}).encode()

async def serve(reader, writer):
    head = await reader.readuntil(b"\\r\\n\\r\\n")
    length = [int(l.split(b":")[1]) for l in head.split(b"\\r\\n") if l.lower().startswith(b"content-length")]
    await reader.readexactly(length[0] if length else 0)
    writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: "
        + str(len(BODY)).encode() + b"\\r\\nConnection: close\\r\\n\\r\\n" + BODY)
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = TrainGateClient()
    answer = await client.chat(f"http://127.0.0.1:{port}", {"model": "m", "messages": []}, api_key="k")
    assert answer.choices[0].message["content"] == "4"
    await client.aclose()
    server.close()

asyncio.run(main())
"""


def test_a_chat_call_needs_neither_httpcore_nor_h11() -> None:
    # The Lambda artifact ships without them (the Makefile's lambda_artifact): httpx imports
    # httpcore only to build its own transport, which the TrainGate client does not use.
    probe = _fresh("worker", _CHAT)
    assert probe.loaded(["aiohttp", "httpx"])  # the call went through the kit's stack
    assert probe.loaded(["httpcore", "h11"]) == []


#: A deploy with a Workflow, as template.yaml sets its variables.
WORKFLOW_DEPLOY = {
    "WORKFLOW": "examples.osmosis03.workflow:AnswerWorkflow",
    "GRADER": "examples.osmosis03.workflow:ContainsLabel",
    "ROLLOUT_SDK_OSMOSIS03_RESULT_WAIT_SECONDS": "20",
}


@pytest.mark.parametrize("entry", ["api", "poll", "redrive", "worker_failed"])
def test_only_the_workers_import_the_workflow(entry: str) -> None:
    served = _fresh(entry, "import handler", WORKFLOW_DEPLOY)
    assert served.loaded(["examples.osmosis03.workflow"]) == []
    assert served.loaded(NOT_AT_IMPORT.get(entry, ())) == []
    worker = _fresh("worker", "import handler", WORKFLOW_DEPLOY)
    assert worker.loaded(["examples.osmosis03.workflow"])  # at its cold start


def test_an_http_function_finds_a_missing_workflow_module_at_its_cold_start() -> None:
    missing = {**WORKFLOW_DEPLOY, "GRADER": "examples.nowhere:Grader"}
    probe = _fresh("api", "import handler", missing, ok=False)
    assert "GRADER is examples.nowhere:Grader, but the build has no module" in (probe.error or "")
