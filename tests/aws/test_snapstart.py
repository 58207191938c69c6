"""SnapStart (issue 13, item 3): the hooks called by hand, handler.py's import under a network
guard, and the template as the SAM translator expands it with SnapStart on.

SnapStart itself cannot run here (no AWS, no container engine): these check what the kit
controls. After the after-restore hooks, the TrainGate client and the boto3 clients connect
afresh and ``random`` draws a sequence of its own; importing handler.py (which registers the
hooks) connects nowhere and looks no name up; every function is published behind the alias
``live`` with SnapStart on, and whatever invokes a function names the alias.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import pytest
import snapshot_restore_py

from rollout_sdk.aws import snapstart
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.traingate.transport import AiohttpTransport
from testkit.aws import fake_aws_env

from .conftest import ROOT
from .permissions import ACCOUNT, ALIAS, REGION, Need, Stack
from .permissions import stack_named_by_ids as stack
from .test_permissions import translate

pytestmark = pytest.mark.timeout(120)


def hooks_of(runtime: Any) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """The after-restore hooks registered for ``runtime`` (tests import handler.py many times;
    the package's list keeps each import's)."""
    return [
        (func, args, kwargs)
        for func, args, kwargs in snapshot_restore_py.get_after_restore()
        if args and args[0] is runtime
    ]


def restore(runtime: Any) -> None:
    """What Lambda does after resuming an environment from a snapshot: run its hooks, in order."""
    for func, args, kwargs in hooks_of(runtime):
        func(*args, **kwargs)


# ---------------------------------------------------------------------- the hooks


def test_handler_registers_one_after_restore_hook_for_its_runtime(handler: Any) -> None:
    assert [func for func, _, _ in hooks_of(handler.runtime)] == [snapstart.after_restore]
    assert snapshot_restore_py.get_before_snapshot() == []  # nothing to do before it


def test_without_the_package_registering_is_a_no_op(
    handler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # import fails, as off Lambda
    before = len(snapshot_restore_py.get_after_restore())
    assert snapstart.register(handler.runtime) is False
    assert len(snapshot_restore_py.get_after_restore()) == before


def test_after_a_restore_the_clients_connect_afresh_and_rollouts_still_run(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    runtime = handler.runtime

    def rollout(rollout_id: str) -> None:
        event = load_event(ROOT / "events" / "init.json")
        body = json.loads(event["body"])
        body.update(server_url=url, rollout_id=rollout_id)
        event["body"] = json.dumps(body)
        accepted = invoke(handler, "ApiFunction", event, timeout_seconds=29)
        assert accepted.result["statusCode"] == 202
        ran = invoke(handler, "WorkerFunction", accepted.dispatched[0], timeout_seconds=900)
        assert ran.result["state"] == "DELIVERED"

    rollout("before-snapshot")  # a warm environment: pools hold connections, as in a snapshot
    pool = runtime.client.transport
    assert isinstance(pool, AiohttpTransport)
    assert pool.is_open
    dynamodb_pools = runtime.clients.dynamodb._endpoint.http_session._manager.pools
    assert len(dynamodb_pools) > 0

    restore(runtime)

    assert not pool.is_open
    assert runtime.client.transport is not pool  # a new pool on the next request
    assert len(dynamodb_pools) == 0  # botocore's pools emptied; the client object stays
    rollout("after-restore")
    assert [r["status"] for r in traingate.completions["after-restore"]] == ["COMPLETED"]


def test_environments_restored_from_one_snapshot_draw_different_random_numbers(
    handler: Any,
) -> None:
    snapshot = random.getstate()  # what every environment resumed from one snapshot starts with

    def resumed(*, hooks: bool) -> list[float]:
        random.setstate(snapshot)
        if hooks:
            restore(handler.runtime)
        return [random.random() for _ in range(4)]

    assert resumed(hooks=False) == resumed(hooks=False)  # the problem: the same sequence
    assert resumed(hooks=True) != resumed(hooks=True)


def test_a_restore_before_any_client_was_built_builds_none(handler: Any) -> None:
    restore(handler.runtime)
    assert "client" not in vars(handler.runtime)
    assert not any(hasattr(value, "meta") for value in vars(handler.runtime.clients).values())


# ---------------------------------------------------------------------- nothing at import

#: A child that imports handler.py and runs its after-restore hooks under an audit hook that
#: fails any connect, send or name lookup (as bench/coldchild.py guards its imports).
GUARDED_IMPORT = """
import json, sys
BLOCKED = {"socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
           "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg"}
attempts = []
def audit(event, args):
    if event in BLOCKED:
        attempts.append(event)
        raise OSError("network touched: " + event)
sys.path.insert(0, "")
sys.addaudithook(audit)
import handler
import snapshot_restore_py
for func, args, kwargs in snapshot_restore_py.get_after_restore():
    func(*args, **kwargs)
print(json.dumps({"attempts": attempts, "hooks": len(snapshot_restore_py.get_after_restore())}))
"""


@pytest.mark.parametrize(
    "variables",
    [
        {"HAND_OFF": "direct", "POWERTOOLS_TRACE_DISABLED": "true"},
        {
            "HAND_OFF": "queue",
            "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/rollouts",
            "POWERTOOLS_TRACE_DISABLED": "false",  # Tracing=subsegments: the X-Ray SDK too
        },
    ],
    ids=["direct", "queue-subsegments"],
)
def test_importing_handler_connects_nowhere_and_reads_no_secret(variables: dict[str, str]) -> None:
    worker = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:worker"
    env = fake_aws_env(
        {
            "AGENT_LOOP": "examples.calculator.agent:agent_loop",
            "TABLE_NAME": "rollouts",
            "PAYLOAD_BUCKET": "payloads",
            "CALLBACK_KEY_KMS_KEY_ID": "0b5e7e0e-0000-4000-8000-000000000000",
            "SERVER_KEY_SECRET_ARN": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:key-AbCdEf",
            "WORKER_FUNCTION_NAME": f"{worker}:{ALIAS}",
            # Anything that did call AWS would go here, and be refused by the guard first.
            "ROLLOUT_SDK_AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            **variables,
        },
        clean=True,
    )
    done = subprocess.run(
        [sys.executable, "-c", GUARDED_IMPORT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"attempts": [], "hooks": 1}


# ---------------------------------------------------------------------- the template


@pytest.fixture(scope="module")
def translated() -> Any:
    return translate()


def function_arn(function: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function}"


def resources_of(stack: Stack, kind: str) -> dict[str, Any]:
    return {
        logical: stack.value(resource["Properties"])
        for logical, resource in stack.resources.items()
        if resource["Type"] == kind and stack.exists(logical)
    }


@pytest.mark.parametrize("hand_off", ["direct", "queue"])
def test_with_snapstart_on_every_function_snapshots_its_published_versions(
    translated: Any, hand_off: str
) -> None:
    on = stack(translated, SnapStart="PublishedVersions", HandOff=hand_off)
    functions = resources_of(on, "AWS::Lambda::Function")
    assert len(functions) == (6 if hand_off == "queue" else 4)
    assert {p["SnapStart"]["ApplyOn"] for p in functions.values()} == {"PublishedVersions"}
    off = resources_of(stack(translated, HandOff=hand_off), "AWS::Lambda::Function")
    assert {p["SnapStart"]["ApplyOn"] for p in off.values()} == {"None"}  # the default
    # Each function has the alias, on a version of its own.
    aliases = resources_of(on, "AWS::Lambda::Alias")
    assert sorted(a["FunctionName"] for a in aliases.values()) == sorted(functions)
    assert {a["Name"] for a in aliases.values()} == {ALIAS}


def test_turning_snapstart_on_publishes_a_new_version_of_every_function(translated: Any) -> None:
    # SAM's version logical ids hash the !Ref SnapStart, not its value: the version's
    # description is what changes (a new description replaces the version).
    def descriptions(**parameters: str) -> dict[str, str]:
        versions = resources_of(stack(translated, **parameters), "AWS::Lambda::Version")
        return {v["FunctionName"]: v["Description"] for v in versions.values()}

    for hand_off, count in (("direct", 4), ("queue", 6)):
        off = descriptions(HandOff=hand_off)
        on = descriptions(HandOff=hand_off, SnapStart="PublishedVersions")
        assert off.keys() == on.keys() and len(on) == count
        assert all(off[f] != on[f] for f in on), (off, on)
    secret = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:k-AbCdEf"
    assert descriptions(ServerKeySecretArn=secret)["ApiFunction"] != descriptions()["ApiFunction"]


def test_everything_that_invokes_a_function_names_its_alias(translated: Any) -> None:
    direct = stack(translated, SnapStart="PublishedVersions")
    worker_alias = f"{function_arn('WorkerFunction')}:{ALIAS}"
    functions = resources_of(direct, "AWS::Lambda::Function")
    for caller in ("ApiFunction", "RedriveFunction"):
        variables = functions[caller]["Environment"]["Variables"]
        assert variables["WORKER_FUNCTION_NAME"] == worker_alias
        # The grant covers the qualified ARN it invokes, and only that.
        allowed = direct.judge(
            caller,
            [
                Need("lambda:InvokeFunction", worker_alias, "init"),
                Need("lambda:InvokeFunction", function_arn("WorkerFunction"), "unqualified"),
            ],
        )
        assert [v.allowed for v in allowed] == [True, False]
    # The asynchronous invoke configuration is the alias's; its failure destination an alias.
    (config,) = [
        c
        for c in resources_of(direct, "AWS::Lambda::EventInvokeConfig").values()
        if c["FunctionName"] == "WorkerFunction"
    ]
    assert config["Qualifier"] == ALIAS
    failure_alias = f"{function_arn('WorkerFailureFunction')}:{ALIAS}"
    assert config["DestinationConfig"]["OnFailure"]["Destination"] == failure_alias
    destination = direct.judge("WorkerFunction", direct.service_needs("WorkerFunction"))
    assert all(v.allowed for v in destination)  # SAM grants the alias it invokes
    # API Gateway's permission and the re-drive's schedule target aliases.
    permissions = resources_of(direct, "AWS::Lambda::Permission").values()
    assert {p["FunctionName"] for p in permissions} == {f"{function_arn('ApiFunction')}:{ALIAS}"}
    (schedule,) = resources_of(direct, "AWS::Scheduler::Schedule").values()
    assert schedule["Target"]["Arn"] == f"{function_arn('RedriveFunction')}:{ALIAS}"
    # Queue mode: the event source mappings invoke the aliases.
    queue = stack(translated, SnapStart="PublishedVersions", HandOff="queue")
    mappings = resources_of(queue, "AWS::Lambda::EventSourceMapping").values()
    assert sorted(m["FunctionName"] for m in mappings) == [
        f"{function_arn('DeadLetterFunction')}:{ALIAS}",
        f"{function_arn('QueueWorkerFunction')}:{ALIAS}",
    ]
