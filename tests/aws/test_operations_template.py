"""The template's operations resources (docs/operations.md), by inspection: no AWS.

Each alarm reads the metric it should, with the dimensions that metric is emitted with; every
function logs to a log group of the stack's own, kept ``LogRetentionDays``; the alarms notify
the SNS topic only when one is given; the dashboard is valid JSON naming only metrics that
exist. A CloudWatch metric is its namespace, name and exact set of dimensions, so an alarm on
another dimension set than the emitter's never fires: these tests are what stops that.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from rollout_sdk.errors import FailureCategory
from rollout_sdk.stack import LambdaFunction

from .conftest import ROOT

#: The kit's metrics (namespace RolloutSDK) and the dimensions each is emitted with, as agreed
#: for issue 12: every metric carries Function and HandOff; RolloutsFinished also Status and
#: Category. Powertools Metrics adds ``service`` to each (POWERTOOLS_SERVICE_NAME is set), which
#: is why the template queries these metrics without naming a dimension set.
NAMESPACE = "RolloutSDK"
BASE = frozenset({"Function", "HandOff"})
EMITTED: dict[str, frozenset[str]] = {
    "RolloutsAccepted": BASE,
    "RolloutsStarted": BASE,
    "RolloutsFinished": BASE | {"Status", "Category"},
    "RolloutsDelivered": BASE,
    "RolloutsParked": BASE,
    "RolloutsRedriven": BASE,
    "RolloutsUndeliverable": BASE,
    "CallbackAttempts": BASE,
    "ColdStarts": BASE,
    "ChatCallLatency": BASE,
    "RolloutDuration": BASE,
    "OldestParkedAge": BASE,
    "RolloutCost": BASE,
    "OutboundRefused": BASE,
}
DIMENSION_VALUES = {
    "Function": {"api", "worker", "queue_worker", "failure", "dead_letter", "redrive", "local"},
    "HandOff": {"direct", "queue", "local"},
    "Status": {"COMPLETED", "ERROR"},
    "Category": {c.value for c in FailureCategory} | {"none"},
}
#: AWS metrics the template may name, with their dimension name (one each, exactly).
AWS_METRICS: dict[str, tuple[set[str], str]] = {
    "AWS/Lambda": ({"Invocations", "Errors", "Throttles", "ConcurrentExecutions"}, "FunctionName"),
    "AWS/SQS": (
        {
            "ApproximateNumberOfMessagesVisible",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateAgeOfOldestMessage",
        },
        "QueueName",
    ),
    # The HTTP API's names (4xx, 5xx by ApiId), not the REST API's (5XXError by ApiName).
    "AWS/ApiGateway": ({"Count", "4xx", "5xx", "Latency"}, "ApiId"),
}
QUEUE_ONLY = {"QueueWorkerFunction", "DeadLetterFunction", "RolloutQueue", "RolloutDeadLetterQueue"}
NOTIFY = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}

_QUERY = re.compile(
    r"^SELECT (?P<stat>SUM|MAX|MIN|AVG|COUNT)\((?P<metric>\w+)\) FROM (?P<source>\S+)"
    r"(?: WHERE (?P<where>.+?))?(?: GROUP BY (?P<group>.+))?$"
)
_FILTER = re.compile(r"^(\w+) = '([^']*)'$")
_SEARCH = re.compile(
    r"""^SEARCH\('Namespace="(?P<ns>[^"]+)" MetricName="(?P<metric>[^"]+)"', '(?P<stat>[^']+)', \d+\)$"""
)


def metrics_insights(query: str) -> tuple[str, str, dict[str, str], list[str]]:
    """(stat, metric, WHERE filters, GROUP BY dimensions) of a query on the kit's namespace,
    checked against what the metric is emitted with."""
    match = _QUERY.match(query)
    assert match, f"not a Metrics Insights query this test reads: {query!r}"
    # FROM SCHEMA(RolloutSDK, ...) would match only that exact dimension set: never the
    # emitted one, which Powertools extends with `service`.
    assert match["source"] == NAMESPACE, query
    metric = match["metric"]
    assert metric in EMITTED, f"{metric} is not a metric the kit emits"
    filters: dict[str, str] = {}
    for clause in (match["where"] or "").split(" AND ") if match["where"] else []:
        part = _FILTER.match(clause)
        assert part, f"unexpected WHERE clause {clause!r} in {query!r}"
        filters[part[1]] = part[2]
    group = [d.strip() for d in match["group"].split(",")] if match["group"] else []
    for dimension in [*filters, *group]:
        assert dimension in EMITTED[metric], f"{metric} is not emitted with {dimension}: {query}"
    for dimension, value in filters.items():
        assert value in DIMENSION_VALUES[dimension], f"{dimension}={value!r} is never emitted"
    return match["stat"], metric, filters, group


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def alarm(template: dict[str, Any], name: str) -> dict[str, Any]:
    resource = template["Resources"][name]
    assert resource["Type"] == "AWS::CloudWatch::Alarm"
    props: dict[str, Any] = resource["Properties"]
    return props


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def stat_metric(query: dict[str, Any]) -> tuple[str, str, dict[str, Any], str, int]:
    stat = query["MetricStat"]
    metric = stat["Metric"]
    dims = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
    return metric["Namespace"], metric["MetricName"], dims, stat["Stat"], stat["Period"]


# ---------------------------------------------------------------------------- alarms


def test_every_alarm_notifies_the_topic_only_when_one_is_given(template: dict[str, Any]) -> None:
    parameter = template["Parameters"]["AlarmTopicArn"]
    assert parameter["Default"] == ""
    assert template["Conditions"]["HasAlarmTopic"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]
    }
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    assert len(alarms) == 10
    for name, resource in alarms.items():
        props = resource["Properties"]
        assert props["AlarmActions"] == NOTIFY, name
        assert props["OKActions"] == NOTIFY, name
        assert "AlarmName" not in props, f"{name}: a fixed name collides between stacks"
        assert "docs/operations.md#" in json.dumps(props["AlarmDescription"]), name


def test_aws_metric_alarms_name_the_metric_and_its_one_dimension(
    template: dict[str, Any],
) -> None:
    expected = {
        # alarm: (namespace, metric, dimension value, statistic, period, periods, threshold)
        "WorkerFailureInvokedAlarm": (
            "AWS/Lambda",
            "Invocations",
            {"Ref": "WorkerFailureFunction"},
            "Sum",
            60,
            1,
            0,
        ),
        "WorkerErrorsAlarm": (
            "AWS/Lambda",
            "Errors",
            {"Fn::If": ["UseQueue", {"Ref": "QueueWorkerFunction"}, {"Ref": "WorkerFunction"}]},
            "Sum",
            60,
            1,
            0,
        ),
        "WorkerThrottlesAlarm": (
            "AWS/Lambda",
            "Throttles",
            {"Fn::If": ["UseQueue", {"Ref": "QueueWorkerFunction"}, {"Ref": "WorkerFunction"}]},
            "Sum",
            300,
            3,
            0,
        ),
        "Api5xxAlarm": ("AWS/ApiGateway", "5xx", {"Ref": "RolloutHttpApi"}, "Sum", 60, 1, 0),
    }
    for name, (namespace, metric, value, stat, period, periods, threshold) in expected.items():
        props = alarm(template, name)
        assert props["Namespace"] == namespace, name
        assert props["MetricName"] == metric, name
        metrics, dimension = AWS_METRICS[namespace]
        assert metric in metrics
        assert props["Dimensions"] == [{"Name": dimension, "Value": value}], name
        assert props["Statistic"] == stat, name
        assert props["Period"] == period, name
        assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == periods, name
        assert props["Threshold"] == threshold, name
        assert props["ComparisonOperator"] == "GreaterThanThreshold", name
        assert props["TreatMissingData"] == "notBreaching", name


def test_metric_math_alarms_sum_exactly_named_aws_metrics(template: dict[str, Any]) -> None:
    dead = template["Resources"]["DeadLettersAlarm"]
    assert dead["Condition"] == "UseQueue"  # the dead-letter queue exists only then
    queue_name = {"Fn::GetAtt": "RolloutDeadLetterQueue.QueueName"}  # !GetAtt, as loaded
    expected = {
        "DeadLettersAlarm": {
            "visible": (
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                {"QueueName": queue_name},
                "Maximum",
            ),
            "inflight": (
                "AWS/SQS",
                "ApproximateNumberOfMessagesNotVisible",
                {"QueueName": queue_name},
                "Maximum",
            ),
            "reports": (
                "AWS/Lambda",
                "Invocations",
                {"FunctionName": {"Ref": "DeadLetterFunction"}},
                "Sum",
            ),
            "reportfailures": (
                "AWS/Lambda",
                "Errors",
                {"FunctionName": {"Ref": "DeadLetterFunction"}},
                "Sum",
            ),
        },
        "RecoveryErrorsAlarm": {
            "failure": (
                "AWS/Lambda",
                "Errors",
                {"FunctionName": {"Ref": "WorkerFailureFunction"}},
                "Sum",
            ),
            "redrive": (
                "AWS/Lambda",
                "Errors",
                {"FunctionName": {"Ref": "RedriveFunction"}},
                "Sum",
            ),
        },
    }
    for name, inputs in expected.items():
        props = alarm(template, name)
        queries = {q["Id"]: q for q in props["Metrics"]}
        (output,) = [q for q in props["Metrics"] if q["ReturnData"]]
        assert set(queries) == {*inputs, output["Id"]}, name
        for query_id, want in inputs.items():
            namespace, metric, dims, stat, period = stat_metric(queries[query_id])
            assert (namespace, metric, dims, stat) == want, (name, query_id)
            assert metric in AWS_METRICS[namespace][0]
            assert set(dims) == {AWS_METRICS[namespace][1]}
            assert period == 60
            assert not queries[query_id]["ReturnData"]
        # Every input counts, missing data as 0.
        for query_id in inputs:
            assert f"FILL({query_id}, 0)" in output["Expression"], (name, query_id)
        assert props["Threshold"] == 0
        assert props["ComparisonOperator"] == "GreaterThanThreshold"
        assert props["TreatMissingData"] == "notBreaching"


def test_the_kits_metrics_are_alarmed_on_whatever_dimensions_they_carry(
    template: dict[str, Any],
) -> None:
    expected = {
        # alarm: (statistic, metric, filters, period, threshold, missing data)
        "UndeliverableAlarm": ("SUM", "RolloutsUndeliverable", {}, 60, 0, "notBreaching"),
        "OutboundRefusedAlarm": ("SUM", "OutboundRefused", {}, 60, 0, "notBreaching"),
        "InfrastructureFailuresAlarm": (
            "SUM",
            "RolloutsFinished",
            {"Category": FailureCategory.INFRASTRUCTURE.value},
            60,
            0,
            "notBreaching",
        ),
        "OldestParkedAgeAlarm": (
            "MAX",
            "OldestParkedAge",
            {},
            300,
            {"Ref": "ParkedAgeAlarmSeconds"},
            "missing",
        ),
    }
    for name, (stat, metric, filters, period, threshold, missing) in expected.items():
        props = alarm(template, name)
        (query,) = props["Metrics"]  # one query returning one time series
        assert query["ReturnData"] is True
        assert query["Period"] == period, name
        got_stat, got_metric, got_filters, group = metrics_insights(query["Expression"])
        assert (got_stat, got_metric, got_filters) == (stat, metric, filters), name
        assert group == [], f"{name}: an alarm's query must return one time series"
        assert props["Threshold"] == threshold, name
        assert props["ComparisonOperator"] == "GreaterThanThreshold", name
        assert props["TreatMissingData"] == missing, name
    parked = template["Parameters"]["ParkedAgeAlarmSeconds"]
    assert parked["Type"] == "Number" and parked["Default"] == 3600


def test_no_alarm_names_a_fixed_dimension_set_of_the_kits_namespace(
    template: dict[str, Any],
) -> None:
    for name, resource in resources(template, "AWS::CloudWatch::Alarm").items():
        props = resource["Properties"]
        assert props.get("Namespace") != NAMESPACE, name
        for node in walk(props):
            if isinstance(node, dict) and "Namespace" in node:
                assert node["Namespace"] != NAMESPACE, name
            if isinstance(node, str):
                assert "SCHEMA(" not in node, name


# ---------------------------------------------------------------------------- log retention


def test_every_function_logs_to_its_own_group_kept_for_the_retention_parameter(
    template: dict[str, Any],
) -> None:
    days = template["Parameters"]["LogRetentionDays"]
    assert days["Type"] == "Number" and days["Default"] == 30
    assert 30 in days["AllowedValues"]
    functions = resources(template, "AWS::Serverless::Function")
    assert len(functions) == len(LambdaFunction)
    groups = resources(template, "AWS::Logs::LogGroup")
    used: set[str] = set()
    for name, function in functions.items():
        config = function["Properties"]["LoggingConfig"]
        ref = config["LogGroup"]["Ref"]
        assert ref in groups, name
        assert ref not in used, f"{name} shares its log group"
        used.add(ref)
        group = groups[ref]
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
        # The same condition: a queue-mode function's group exists exactly when it does.
        assert group.get("Condition") == function.get("Condition"), name
        log_name = group["Properties"]["LogGroupName"]["Fn::Sub"]
        # Never Lambda's default /aws/lambda/<function>, which exists already for a function
        # that ran before the upgrade, outside CloudFormation; and never aws/ (Lambda refuses).
        assert log_name.startswith("/rollout-sdk/${AWS::StackName}/"), name
    assert used == set(groups)
    prefix = template["Outputs"]["LogGroupPrefix"]["Value"]["Fn::Sub"]
    assert prefix == "/rollout-sdk/${AWS::StackName}/"


# ---------------------------------------------------------------------------- API throttling


def test_the_default_route_is_throttled_by_parameters(template: dict[str, Any]) -> None:
    settings = template["Resources"]["RolloutHttpApi"]["Properties"]["DefaultRouteSettings"]
    for key, parameter, condition in (
        ("ThrottlingBurstLimit", "ApiThrottlingBurstLimit", "HasApiBurstLimit"),
        ("ThrottlingRateLimit", "ApiThrottlingRateLimit", "HasApiRateLimit"),
    ):
        assert settings[key] == {"Fn::If": [condition, {"Ref": parameter}, {"Ref": "AWS::NoValue"}]}
        assert template["Parameters"][parameter]["Default"] == ""  # the account's limits
        assert template["Conditions"][condition] == {
            "Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, ""]}]
        }


# ---------------------------------------------------------------------------- dashboard


def _resolve(node: Any, queue: bool, parameters: dict[str, Any]) -> Any:
    """A value of the dashboard's Fn::Sub variables for one HandOff mode."""
    if isinstance(node, str):
        return node
    if "Fn::If" in node:
        condition, yes, no = node["Fn::If"]
        assert condition == "UseQueue"
        return _resolve(yes if queue else no, queue, parameters)
    if "Ref" in node:
        assert queue or node["Ref"] not in QUEUE_ONLY, node
        return f"<{node['Ref']}>"
    if "Fn::Sub" in node:
        return _substitute(node["Fn::Sub"], {}, queue, parameters)
    raise AssertionError(f"unexpected intrinsic {node!r}")


def _substitute(
    text: str, variables: dict[str, Any], queue: bool, parameters: dict[str, Any]
) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match[1]
        if name in variables:
            return str(_resolve(variables[name], queue, parameters))
        if name in parameters:
            return str(parameters[name]["Default"])
        assert queue or name.split(".")[0] not in QUEUE_ONLY, name
        return f"<{name}>"

    return re.sub(r"\$\{([^}]+)\}", replace, text)


def dashboards(template: dict[str, Any]) -> Iterator[tuple[bool, dict[str, Any]]]:
    body = template["Resources"]["RolloutDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    text, variables = body
    for queue in (False, True):
        rendered = _substitute(text, variables, queue, template["Parameters"])
        yield queue, json.loads(rendered)


def test_the_dashboard_parses_and_names_only_emitted_metrics(template: dict[str, Any]) -> None:
    for queue, dashboard in dashboards(template):
        seen: set[str] = set()
        for widget in dashboard["widgets"]:
            assert {"x", "y", "width", "height"} <= set(widget)
            if widget["type"] != "metric":
                continue
            props = widget["properties"]
            assert props["region"] == "<AWS::Region>"
            for line in props["metrics"]:
                head = line[0]
                if isinstance(head, dict):  # an expression
                    expression = head["expression"]
                    if expression.startswith("SEARCH("):
                        match = _SEARCH.match(expression)
                        assert match, expression
                        assert match["ns"] == NAMESPACE and match["metric"] in EMITTED
                        seen.add(match["metric"])
                    else:
                        seen.add(metrics_insights(expression)[1])
                    continue
                namespace, metric, dimension, value = line[:4]
                assert metric in AWS_METRICS[namespace][0], (namespace, metric)
                assert dimension == AWS_METRICS[namespace][1], (namespace, metric)
                assert value.startswith("<"), value
        # Every metric the kit emits is on it.
        assert seen == set(EMITTED), set(EMITTED) - seen
        text = json.dumps(dashboard)
        assert ("RolloutDeadLetterQueue" in text) is queue
        assert ("<QueueWorkerFunction>" in text) is queue
        assert ("<WorkerFunction>" in text) is not queue


def test_every_alarm_links_a_section_of_the_operations_doc(template: dict[str, Any]) -> None:
    doc = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    # GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens.
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in doc.splitlines()
        if line.startswith("#")
    }
    for name, resource in resources(template, "AWS::CloudWatch::Alarm").items():
        description = json.dumps(resource["Properties"]["AlarmDescription"])
        (anchor,) = re.findall(r"docs/operations\.md#([a-z0-9-]+)", description)
        assert anchor in anchors, f"{name} links #{anchor}, which docs/operations.md lacks"
        assert f"`{name}`" in doc, f"docs/operations.md does not describe {name}"
