"""The six functions, named once (rollout_sdk/stack.py): the template, handler.py, the metrics'
dimension, the cost labels and `rollout-sdk invoke` all read the one enumeration, and the values
users and dashboards see stay the ones they have seen."""

from __future__ import annotations

import re
from typing import Any

from rollout_sdk.aws.runtime import DURABLE_EXECUTION_TIMEOUT_SECONDS, DURABLE_RETENTION_DAYS
from rollout_sdk.aws.telemetry import hand_off_of
from rollout_sdk.local.emulator import load_template
from rollout_sdk.local.invoke import ALIASES, ENTRY_POINTS
from rollout_sdk.stack import LambdaFunction

from .conftest import ROOT

#: What each function has been called since it first shipped (dashboards, alarms, log
#: subscriptions and stored estimates read these): (logical id, handler, Function dimension,
#: cost label, log group, hand-off).
SEEN = {
    ("ApiFunction", "handler.api", "api", "api", "api", None),
    ("PollFunction", "handler.poll", "poll", "poll", "poll", None),
    ("WorkerFunction", "handler.worker", "worker", "worker", "worker", "direct"),
    (
        "WorkerFailureFunction",
        "handler.worker_failed",
        "failure",
        "worker-failed",
        "failure",
        "direct",
    ),
    ("RedriveFunction", "handler.redrive", "redrive", "redrive", "redrive", None),
    # Issue 25 (DurableWorker=true): new names, seen by no one before.
    (
        "DurableWorkerFunction",
        "handler.durable_worker",
        "durable_worker",
        "durable-worker",
        "durable-worker",
        "direct",
    ),
    (
        "QueueWorkerFunction",
        "handler.worker_batch",
        "queue_worker",
        "queue-worker",
        "queue-worker",
        "queue",
    ),
    (
        "DeadLetterFunction",
        "handler.dead_letters",
        "dead_letter",
        "dead-letters",
        "dead-letter",
        "queue",
    ),
}


def test_the_names_are_the_ones_users_have_seen() -> None:
    named = {
        (
            f.names.logical_id,
            f"handler.{f.names.entry}",
            f.names.dimension,
            f.names.cost_label,
            f.names.log_group,
            f.names.hand_off,
        )
        for f in LambdaFunction
    }
    assert named == SEEN


def test_the_template_declares_each_function_as_named() -> None:
    resources = load_template(ROOT / "template.yaml")["Resources"]
    functions = {k for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}
    assert functions == {f.names.logical_id for f in LambdaFunction}
    for function in LambdaFunction:
        names = function.names
        properties = resources[names.logical_id]["Properties"]
        assert properties["Handler"] == f"handler.{names.entry}"
        group = resources[properties["LoggingConfig"]["LogGroup"]["Ref"]]["Properties"]
        assert (
            group["LogGroupName"]["Fn::Sub"]
            == f"/rollout-sdk/${{AWS::StackName}}/{names.log_group}"
        )


def test_handler_py_and_invoke_read_the_enumeration(handler: Any) -> None:
    for function in LambdaFunction:
        names = function.names
        assert callable(getattr(handler, names.entry))
        assert handler.EVENT_SOURCES[names.entry] == names.events
        assert ENTRY_POINTS[names.logical_id] == names.entry
        assert ALIASES[names.cost_label] == ALIASES[names.dimension] == names.logical_id


def test_the_hand_off_dimension_follows_the_function() -> None:
    assert hand_off_of("worker", "queue") == "direct"
    assert hand_off_of("queue_worker", "direct") == "queue"
    assert hand_off_of("api", "queue") == "queue"
    assert hand_off_of("redrive", "direct") == "direct"


def test_the_durable_workers_config_is_what_the_kit_reckons_with() -> None:
    """The execution timeout the deadline check derives from, and the history's retention the
    cost estimate prices (docs/cost.md, "Durable worker")."""
    resources = load_template(ROOT / "template.yaml")["Resources"]
    config = resources[LambdaFunction.DURABLE_WORKER.names.logical_id]["Properties"][
        "DurableConfig"
    ]
    assert config["ExecutionTimeout"] == DURABLE_EXECUTION_TIMEOUT_SECONDS
    assert config["RetentionPeriodInDays"] == DURABLE_RETENTION_DAYS


#: Long but plausible values of the parameters a VersionDescription carries: module paths of
#: about 40 characters, a named secret, two allowed hosts.
LONG_VALUES = {
    "AgentLoop": "my_team.arithmetic.agent_loop:agent_loop",
    "Workflow": "my_team.arithmetic.workflow:AnswerWorkflow",
    "Grader": "my_team.arithmetic.workflow:ContainsLabel",
    "McpFolder": "",
    "AllowedServerHosts": "traingate.example.com:8443,10.0.12.7",
    "Secret": "rollout-sdk-prod-server-key-AbCdEf",
    "Serves": "osmosis-ai-0.3.8",
    "Layer": "12",
    "DurableLayer": "3",
}


def test_every_version_description_fits_lambdas_256_characters() -> None:
    """Lambda refuses a version description over 256 characters, which would fail the deploy:
    each function's, with the template's defaults and long values of the free-text ones."""
    template = load_template(ROOT / "template.yaml")
    defaults = {name: str(spec.get("Default", "")) for name, spec in template["Parameters"].items()}
    values = {**defaults, **LONG_VALUES, "SnapStart": "PublishedVersions", "Tracing": "subsegments"}
    for function in LambdaFunction:
        properties = template["Resources"][function.names.logical_id]["Properties"]
        text = properties["VersionDescription"]["Fn::Sub"][0]
        described = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], text)
        assert len(described) <= 256, (function.names.logical_id, len(described), described)
