"""The permission check of ``test_permissions.py``: what IAM checks for each AWS call a function's
code makes, the SAM-translated template's roles as concrete statements, and whether one allows
the other.

- :class:`Recorder` records every call of the runtime's boto3 clients (botocore's
  ``before-parameter-build`` and ``after-call`` hooks) while a function's handler runs.
- :data:`OPERATIONS` maps each operation to the IAM actions AWS checks for it, each on a
  resource ARN made from the call's parameters (and, for ``Decrypt``, its answer).
- :class:`Stack` resolves the translated template under one set of parameter values (``Ref``,
  ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::If`` and the conditions) to the names of the resources a
  scenario provisioned, and lists each function's grants: the template's statements, the
  policies SAM adds, and the AWS managed policies (:data:`MANAGED_POLICIES`).
- :meth:`Stack.service_needs` is the allowlist of what the Lambda service itself does with a
  function's role: logs, network interfaces, tracing, the asynchronous destinations, the event
  source mappings, and a durable function's checkpoints. Those are checked as granted, and
  never reported as unused.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlparse

from botocore.exceptions import ClientError

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account: the ARNs it answers with carry it
PARTITION = "aws"
ALIAS = "live"  # template.yaml's AutoPublishAlias

# ---------------------------------------------------------------------- calls and what IAM checks


@dataclass(frozen=True)
class Call:
    """One AWS API call a function's code made: the identifiers of what it touched."""

    mode: str  # the scenario set (parameter values) it ran under
    scenario: str
    function: str
    service: str  # boto3's service name: dynamodb, s3, lambda, kms, sqs, secretsmanager
    operation: str
    params: Mapping[str, Any]
    answer: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.service}.{self.operation}"


@dataclass(frozen=True)
class Need:
    """One IAM action on one resource that AWS checks, and why."""

    action: str
    resource: str
    origin: str  # "dynamodb.TransactWriteItems (Put)", or what the Lambda service does


#: The parameters that name what a call touches: all a check needs, and nothing large.
IDENTIFIERS = (
    "TableName",
    "IndexName",
    "Bucket",
    "Key",
    "FunctionName",
    "Qualifier",
    "QueueUrl",
    "KeyId",
    "SecretId",
    # An invoke that starts a durable execution names it; IAM checks it as any invoke
    # (lambda:InvokeFunction on FunctionName), but the test asserts the hand-off named it.
    "DurableExecutionName",
)


def identifiers(operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """What of ``params`` names the resources: the identifiers, and a transaction's items as
    (kind, table) pairs."""
    kept = {name: params[name] for name in IDENTIFIERS if name in params}
    if operation.startswith("Transact"):
        kept["TransactItems"] = [
            (kind, str(body.get("TableName")))
            for item in params.get("TransactItems", [])
            for kind, body in item.items()
        ]
    if operation.startswith("Batch"):
        kept["RequestItems"] = sorted(params.get("RequestItems", {}))
    return kept


def table_arn(name: str) -> str:
    return (
        name
        if name.startswith("arn:")
        else f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
    )


def function_arn(name: str) -> str:
    if name.startswith("arn:"):
        return name
    if ":function:" in name:  # a partial ARN: ACCOUNT:function:NAME
        return f"arn:{PARTITION}:lambda:{REGION}:{name}"
    return f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:{name}"


def queue_arn(url: str) -> str:
    account, name = urlparse(url).path.strip("/").split("/")[-2:]
    return f"arn:{PARTITION}:sqs:{REGION}:{account}:{name}"


def key_arn(key_id: str) -> str:
    if key_id.startswith("arn:"):
        return key_id
    if key_id.startswith("alias/"):
        raise ValueError(f"a KMS alias ({key_id}) is authorized on the key it names: resolve it")
    return f"arn:{PARTITION}:kms:{REGION}:{ACCOUNT}:key/{key_id}"


Rule = Callable[[Call], list[Need]]


def _on(action: str, resource: Callable[[Call], str]) -> Rule:
    """The rule of an operation AWS checks as ``action`` on one resource of the call."""
    return lambda call: [Need(action, resource(call), call.name)]


def _table_or_index(call: Call) -> str:
    # A Query or Scan of an index is checked on the index's ARN (TABLE/index/NAME).
    table, index = table_arn(call.params["TableName"]), call.params.get("IndexName")
    return f"{table}/index/{index}" if index else table


def _object(call: Call) -> str:
    return f"arn:{PARTITION}:s3:::{call.params['Bucket']}/{call.params['Key']}"


def _bucket(call: Call) -> str:
    return f"arn:{PARTITION}:s3:::{call.params['Bucket']}"


def _function(call: Call) -> str:
    arn, qualifier = function_arn(call.params["FunctionName"]), call.params.get("Qualifier")
    return f"{arn}:{qualifier}" if qualifier else arn


def _queue(call: Call) -> str:
    return queue_arn(call.params["QueueUrl"])


def _key(call: Call) -> str:
    # Decrypt names no key: KMS checks the key that encrypted the ciphertext, which its answer
    # names (KeyId, an ARN).
    key = call.params.get("KeyId") or call.answer.get("KeyId")
    if not key:
        raise ValueError(f"{call.name} in {call.scenario}: which KMS key is unknown")
    return key_arn(str(key))


def _secret(call: Call) -> str:
    secret = str(call.params["SecretId"])
    if not secret.startswith("arn:"):
        raise ValueError(f"{call.name}: secret {secret!r} by name; IAM checks its full ARN")
    return secret


def _transaction(kinds: Mapping[str, str]) -> Rule:
    # "Permissions for Put, Update, Delete, and Get actions are governed by the permissions used
    # for the underlying PutItem, UpdateItem, DeleteItem, and GetItem operations. For the
    # ConditionCheck action, you can use the dynamodb:ConditionCheckItem permission"
    # (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html):
    # there is no dynamodb:TransactWriteItems action to grant.
    return lambda call: [
        Need(kinds[kind], table_arn(table), f"{call.name} ({kind})")
        for kind, table in call.params["TransactItems"]
    ]


def _batch(action: str) -> Rule:
    return lambda call: [Need(action, table_arn(t), call.name) for t in call.params["RequestItems"]]


def _named_alike(
    service: str, resource: Callable[[Call], str], *operations: str
) -> dict[tuple[str, str], Rule]:
    """The rules of operations AWS checks as the action of their own name (``s3:GetObject``
    for ``GetObject``), on one resource of the call."""
    return {(service, op): _on(f"{service}:{op}", resource) for op in operations}


#: Each operation a function may call, and the IAM actions AWS checks for it (on which resource).
#: An operation missing here fails the test: add it, with what AWS documents it needs.
OPERATIONS: dict[tuple[str, str], Rule] = {
    **_named_alike(
        "dynamodb",
        _table_or_index,
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
    ),
    ("dynamodb", "TransactWriteItems"): _transaction(
        {
            "Put": "dynamodb:PutItem",
            "Update": "dynamodb:UpdateItem",
            "Delete": "dynamodb:DeleteItem",
            "ConditionCheck": "dynamodb:ConditionCheckItem",
        }
    ),
    ("dynamodb", "TransactGetItems"): _transaction({"Get": "dynamodb:GetItem"}),
    ("dynamodb", "BatchGetItem"): _batch("dynamodb:BatchGetItem"),
    ("dynamodb", "BatchWriteItem"): _batch("dynamodb:BatchWriteItem"),
    **_named_alike("s3", _object, "PutObject", "GetObject", "DeleteObject"),
    ("s3", "HeadObject"): _on("s3:GetObject", _object),  # HEAD needs read access to the object
    ("s3", "ListObjectsV2"): _on("s3:ListBucket", _bucket),
    ("lambda", "Invoke"): _on("lambda:InvokeFunction", _function),
    **_named_alike(
        "sqs",
        _queue,
        "SendMessage",
        "ReceiveMessage",
        "DeleteMessage",
        "ChangeMessageVisibility",
        "GetQueueAttributes",
    ),
    ("sqs", "SendMessageBatch"): _on("sqs:SendMessage", _queue),  # batches need SendMessage
    ("sqs", "DeleteMessageBatch"): _on("sqs:DeleteMessage", _queue),
    **_named_alike("kms", _key, "Encrypt", "Decrypt", "GenerateDataKey"),
    **_named_alike("secretsmanager", _secret, "GetSecretValue", "DescribeSecret"),
}


def needs_of(call: Call) -> list[Need]:
    """The IAM actions AWS checks for ``call``; KeyError naming an operation not in the table."""
    try:
        rule = OPERATIONS[(call.service, call.operation)]
    except KeyError:
        raise KeyError(
            f"{call.function} calls {call.name} ({call.scenario}), which OPERATIONS does not map "
            "to IAM actions: add it"
        ) from None
    return rule(call)


# ---------------------------------------------------------------------- recording


class Recorder:
    """Records the calls of boto3 clients while :meth:`running` says whose code runs.

    Calls made outside (a test's own set-up through the same clients) are not recorded. The
    clients call from worker threads too (the store's and the vault's), so appending locks.

    With ``enforce``, it also answers as IAM would: a recorded call that the running function's
    role (as that stack resolves it) does not allow fails before it is sent, with the error AWS
    gives (:func:`access_denied`), and its verdicts go to :attr:`refused`. moto's server checks
    no policy, so this is how a path meets a grant the deployment lacks. A call whose resource
    only its answer names (``Decrypt``'s key) is judged when the answer comes, and fails then.
    """

    def __init__(self, enforce: Stack | None = None) -> None:
        self.calls: list[Call] = []
        self.invoked: set[tuple[str, str]] = set()  # (mode, function)
        self.enforce = enforce
        self.refused: list[Verdict] = []
        self._running: tuple[str, str, str] | None = None
        self._lock = threading.Lock()

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build", self._before)
        client.meta.events.register("after-call", self._after)

    @contextmanager
    def running(self, mode: str, scenario: str, function: str) -> Iterator[None]:
        self._running = (mode, scenario, function)
        self.invoked.add((mode, function))
        try:
            yield
        finally:
            self._running = None

    def _before(
        self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        running = self._running
        if running is None:
            return
        mode, scenario, function = running
        answer: dict[str, Any] = {}
        call = Call(
            mode=mode,
            scenario=scenario,
            function=function,
            service=str(model.service_model.service_name),
            operation=str(model.name),
            params=identifiers(str(model.name), params),
            answer=answer,
        )
        context["permission_check_answer"] = answer
        with self._lock:
            self.calls.append(call)
        if self.enforce is not None:
            try:
                needs = needs_of(call)
            except ValueError:  # named by the answer: judged in _after
                context["permission_check_deferred"] = call
                return
            self._judge(call, needs)

    def _after(self, parsed: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        answer = context.get("permission_check_answer")
        if answer is not None and isinstance(parsed, Mapping) and "KeyId" in parsed:
            answer["KeyId"] = parsed["KeyId"]
        deferred = context.pop("permission_check_deferred", None)
        if deferred is not None:
            self._judge(deferred, needs_of(deferred))

    def _judge(self, call: Call, needs: Sequence[Need]) -> None:
        assert self.enforce is not None
        denied = [v for v in self.enforce.judge(call.function, needs) if not v.allowed]
        if denied:
            with self._lock:
                self.refused.extend(denied)
            raise access_denied(call, denied[0])


def access_denied(call: Call, verdict: Verdict) -> ClientError:
    """The error AWS answers ``call`` with when its role does not allow ``verdict``'s need."""
    need = verdict.need
    code, status = (
        ("AccessDenied", 403) if call.service in ("s3", "sqs") else ("AccessDeniedException", 400)
    )
    why = (
        "with an explicit deny in an identity-based policy"
        if verdict.denied_by
        else f"because no identity-based policy allows the {need.action} action"
    )
    message = (
        f"User: arn:{PARTITION}:sts::{ACCOUNT}:assumed-role/{call.function}Role/{call.function}"
        f" is not authorized to perform: {need.action} on resource: {need.resource} {why}"
    )
    error = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(error, call.operation)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the translated template

#: What the Lambda service does with a function's role to put it in a VPC: its network
#: interfaces (AWSLambdaVPCAccessExecutionRole grants these, with the logs).
NETWORK_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)

#: What the durable execution SDK in a durable function's code (``DurableConfig``) calls with the
#: function's role on the execution it runs (an ARN under the function's, qualified by version:
#: FUNCTION:VERSION/durable-execution/NAME/ID), to read its log and record each operation
#: (docs.aws.amazon.com/lambda/latest/dg/durable-security.html). Not a boto3 call the test
#: records (the testing SDK's runner serves them in memory): part of the allowlist.
DURABLE_EXECUTION_ACTIONS = (
    "lambda:CheckpointDurableExecution",
    "lambda:GetDurableExecutionState",
)

#: AWS managed policies SAM attaches, as the managed-policy reference lists them
#: (https://docs.aws.amazon.com/aws-managed-policy/latest/reference/<name>.html). They hold
#: only what the Lambda service uses with the role; a policy not listed here fails the test.
MANAGED_POLICIES: dict[str, list[tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": [
        (("logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"), ("*",)),
    ],
    "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole": [
        (
            (
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
                *NETWORK_INTERFACE_ACTIONS,
            ),
            ("*",),
        ),
    ],
    # SAM adds it to every function with Tracing: Active (what the X-Ray daemon in Lambda's
    # environment sends with; its sampling reads are the daemon's too). Its document as AWS
    # publishes it: docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSXrayWriteOnlyAccess.html
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess": [
        (
            (
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
                "xray:GetSamplingStatisticSummaries",
            ),
            ("*",),
        ),
    ],
    # SAM attaches it, in place of AWSLambdaBasicExecutionRole, to a function with DurableConfig.
    # Its document as AWS publishes it:
    # docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaBasicDurableExecutionRolePolicy.html
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicDurableExecutionRolePolicy": [
        (
            (
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
                *DURABLE_EXECUTION_ACTIONS,
            ),
            ("*",),
        ),
    ],
    "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole": [
        (
            (
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
            ),
            ("*",),
        ),
    ],
}


class _NoValue:
    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE: Any = _NoValue()


@dataclass(frozen=True)
class Grant:
    """One Allow or Deny statement of a function's role, resolved."""

    function: str
    label: str  # the template's Sid, a SAM policy's name, or managed:NAME
    source: str  # "template", "sam" (a policy the translator adds) or "managed"
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]

    def matches(self, action: str, resource: str) -> bool:
        return any(action_matches(a, action) for a in self.actions) and any(
            resource_matches(r, resource) for r in self.resources
        )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in (value if isinstance(value, list) else [value]))


@functools.lru_cache(maxsize=4096)
def _pattern(text: str, *, ignore_case: bool) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
    return re.compile("".join(parts) + r"\Z", re.IGNORECASE if ignore_case else 0)


def action_matches(pattern: str, action: str) -> bool:
    """IAM action matching: case-insensitive, with ``*`` and ``?``."""
    return _pattern(pattern, ignore_case=True).match(action) is not None


def resource_matches(pattern: str, resource: str) -> bool:
    """IAM resource matching: case-sensitive, ``*`` any run of characters, ``?`` one."""
    return _pattern(pattern, ignore_case=False).match(resource) is not None


@dataclass(frozen=True)
class Verdict:
    """A need, and the statements that allow it (none: denied)."""

    function: str
    need: Need
    allowed_by: tuple[Grant, ...]
    denied_by: tuple[Grant, ...] = ()

    @property
    def allowed(self) -> bool:
        return bool(self.allowed_by) and not self.denied_by


class Stack:
    """The translated template under ``parameters``, its resources named by ``physical``
    (logical id -> {"Ref": ..., "Arn": ...}): what each function's role grants, concretely."""

    PSEUDO: ClassVar[dict[str, str]] = {
        "AWS::Region": REGION,
        "AWS::AccountId": ACCOUNT,
        "AWS::Partition": PARTITION,
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::StackName": "rollout-sdk-permission-test",
    }

    def __init__(
        self,
        translated: Mapping[str, Any],
        parameters: Mapping[str, str],
        physical: Mapping[str, Mapping[str, str]],
    ) -> None:
        self.template = translated
        self.resources: Mapping[str, Any] = translated["Resources"]
        declared: Mapping[str, Any] = translated.get("Parameters", {})
        unknown = set(parameters) - set(declared)
        if unknown:
            raise KeyError(f"the template has no parameters {sorted(unknown)}")
        self.parameters: dict[str, Any] = {}
        for name, spec in declared.items():
            raw = str(parameters.get(name, spec.get("Default", "")))
            self.parameters[name] = (
                raw.split(",") if spec.get("Type") == "CommaDelimitedList" else raw
            )
        self.physical = physical
        self._conditions: dict[str, bool] = {}
        self._grants: dict[str, list[Grant]] = {}

    # -- intrinsics

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = bool(self._test(self.template["Conditions"][name]))
        return self._conditions[name]

    def _test(self, node: Any) -> bool:
        if isinstance(node, Mapping) and len(node) == 1:
            ((fn, args),) = node.items()
            if fn == "Fn::Equals":
                left, right = (self.value(a) for a in args)
                return str(left) == str(right)  # CloudFormation compares them as strings
            if fn == "Fn::Not":
                return not self._test(args[0])
            if fn == "Fn::And":
                return all(self._test(a) for a in args)
            if fn == "Fn::Or":
                return any(self._test(a) for a in args)
            if fn == "Condition":
                return self.condition(args)
        raise ValueError(f"cannot evaluate the condition {node!r}")

    def _attribute(self, logical: str, attribute: str) -> str:
        if logical not in self.physical or attribute not in self.physical[logical]:
            raise KeyError(f"no name for {logical}.{attribute}: add it to the scenario's resources")
        return self.physical[logical][attribute]

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.PSEUDO:
            return self.PSEUDO[name]
        if name in self.parameters:
            return self.parameters[name]
        return self._attribute(name, "Ref")

    def _sub(self, text: str, variables: Mapping[str, Any]) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(self.value(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                logical, _, attribute = name.partition(".")
                return self._attribute(logical, attribute)
            return str(self._ref(name))

        return re.sub(r"\$\{([^}!]+)\}", one, text)

    def value(self, node: Any) -> Any:
        """``node`` with every intrinsic resolved (``NO_VALUE`` where AWS::NoValue leaves nothing)."""
        if isinstance(node, list):
            values = [self.value(item) for item in node]
            return [v for v in values if v is not NO_VALUE]
        if not isinstance(node, Mapping):
            return node
        if len(node) == 1:
            ((fn, args),) = node.items()
            if fn == "Ref":
                return self._ref(args)
            if fn == "Fn::GetAtt":
                logical, attribute = args.split(".", 1) if isinstance(args, str) else args
                return self._attribute(logical, attribute)
            if fn == "Fn::Sub":
                text, variables = (args, {}) if isinstance(args, str) else args
                return self._sub(text, variables)
            if fn == "Fn::If":
                name, when_true, when_false = args
                return self.value(when_true if self.condition(name) else when_false)
            if fn == "Fn::Join":
                delimiter, items = args
                resolved = self.value(items)
                return str(delimiter).join(str(i) for i in resolved)
            if fn == "Fn::Split":
                delimiter, text = args
                return str(self.value(text)).split(str(delimiter))
            if fn == "Fn::Select":
                index, items = args
                return self.value(items)[int(index)]
            if fn.startswith("Fn::") or fn == "Condition":
                raise ValueError(f"the resolver does not know {fn}: {node!r}")
        resolved = {key: self.value(item) for key, item in node.items()}
        return {key: item for key, item in resolved.items() if item is not NO_VALUE}

    # -- resources

    def exists(self, logical: str) -> bool:
        condition = self.resources[logical].get("Condition")
        return condition is None or self.condition(condition)

    def functions(self) -> list[str]:
        return [
            logical
            for logical, resource in self.resources.items()
            if resource["Type"] == "AWS::Lambda::Function" and self.exists(logical)
        ]

    def role_of(self, function: str) -> str:
        role = self.resources[function]["Properties"]["Role"]
        if not (isinstance(role, Mapping) and "Fn::GetAtt" in role):
            raise ValueError(f"{function}'s role is not a role of the template: {role!r}")
        logical, _ = role["Fn::GetAtt"]
        return str(logical)

    def grants(self, function: str) -> list[Grant]:
        """Every statement of the function's role: its inline policies (the template's own,
        named by Sid, and those SAM adds), stand-alone policies attached to it, and the AWS
        managed policies (from :data:`MANAGED_POLICIES`)."""
        role = self.role_of(function)
        props = self.resources[role]["Properties"]
        documents: list[tuple[str, Any]] = [
            (str(policy["PolicyName"]), policy["PolicyDocument"])
            for policy in self.value(props.get("Policies", []))
        ]
        for logical, resource in self.resources.items():
            attached = resource["Type"] == "AWS::IAM::Policy" and self.exists(logical)
            if attached and {"Ref": role} in resource["Properties"].get("Roles", []):
                documents.append((logical, resource["Properties"]["PolicyDocument"]))
        grants: list[Grant] = []
        for policy_name, document in documents:
            statements = self.value(document).get("Statement", [])
            # SAM names the template's N-th Policies entry FUNCTIONRolePolicyN: its statements
            # go by Sid, or, for a SAM policy template (expanded without Sids), Policies[N].
            entry = re.fullmatch(rf"{function}RolePolicy(\d+)", policy_name)
            for index, statement in enumerate(
                statements if isinstance(statements, list) else [statements]
            ):
                if entry:
                    label = statement.get("Sid") or f"Policies[{entry.group(1)}]"
                else:
                    label = policy_name if len(statements) == 1 else f"{policy_name}#{index}"
                source = "template" if entry else "sam"
                grants.append(self._grant(function, str(label), source, statement))
        for arn in self.value(props.get("ManagedPolicyArns", [])):
            if arn not in MANAGED_POLICIES:
                raise KeyError(
                    f"{function}'s role has the managed policy {arn}: add its statements to MANAGED_POLICIES"
                )
            for actions, resources in MANAGED_POLICIES[arn]:
                grants.append(
                    Grant(
                        function,
                        "managed:" + arn.rsplit("/", 1)[1],
                        "managed",
                        "Allow",
                        actions,
                        resources,
                    )
                )
        return grants

    @staticmethod
    def _grant(function: str, label: str, source: str, statement: Mapping[str, Any]) -> Grant:
        unsupported = {"Condition", "NotAction", "NotResource", "Principal", "NotPrincipal"} & set(
            statement
        )
        if unsupported:
            raise ValueError(f"{function} {label}: the check cannot evaluate {sorted(unsupported)}")
        return Grant(
            function,
            label,
            source,
            str(statement["Effect"]),
            _strings(statement["Action"]),
            _strings(statement["Resource"]),
        )

    def function_name(self, function: str) -> str:
        return self._attribute(function, "Ref")

    def service_needs(self, function: str) -> list[Need]:
        """What the Lambda service itself does with the function's role (the allowlist)."""
        props = self.resources[function]["Properties"]
        name = self.function_name(function)
        group = f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/{name}"
        stream = f"{group}:log-stream:2026/12/01/[$LATEST]0123456789abcdef"
        needs = [
            Need("logs:CreateLogGroup", f"{group}:*", "Lambda: logs"),
            Need("logs:CreateLogStream", stream, "Lambda: logs"),
            Need("logs:PutLogEvents", stream, "Lambda: logs"),
        ]
        if "DurableConfig" in props:
            execution = f"{function_arn(name)}:1/durable-execution/rollout-1/0123456789abcdef"
            needs += [
                Need(action, execution, "Lambda: the durable execution's checkpoints")
                for action in DURABLE_EXECUTION_ACTIONS
            ]
        if "VpcConfig" in props:  # whenever SubnetIds may put it in a VPC
            needs += [
                Need(action, "*", "Lambda: network interfaces in the VPC (SubnetIds)")
                for action in NETWORK_INTERFACE_ACTIONS
            ]
        tracing = self.value(props.get("TracingConfig", {}))
        if isinstance(tracing, Mapping) and tracing.get("Mode") == "Active":
            needs += [
                Need(action, "*", "Lambda: active tracing")
                for action in ("xray:PutTraceSegments", "xray:PutTelemetryRecords")
            ]
        target = self.value(props.get("DeadLetterConfig", {})).get("TargetArn")
        if target:
            needs += self._destination(str(target), "Lambda: the dead-letter target")
        targets = self.invoked_as(function)
        for logical, resource in self.resources.items():
            properties = resource.get("Properties", {})
            if not self.exists(logical) or properties.get("FunctionName") not in targets:
                continue
            if resource["Type"] == "AWS::Lambda::EventInvokeConfig":
                destinations = self.value(properties.get("DestinationConfig", {}))
                for when in ("OnFailure", "OnSuccess"):
                    arn = destinations.get(when, {}).get("Destination")
                    if arn:
                        needs += self._destination(str(arn), f"Lambda: the {when} destination")
            elif resource["Type"] == "AWS::Lambda::EventSourceMapping":
                source = str(self.value(properties["EventSourceArn"]))
                if ":sqs:" not in source:
                    raise ValueError(f"{logical}: add what Lambda needs to poll {source}")
                needs += [
                    Need(action, source, f"Lambda: polling the queue ({logical})")
                    for action in (
                        "sqs:ReceiveMessage",
                        "sqs:DeleteMessage",
                        "sqs:GetQueueAttributes",
                    )
                ]
        return needs

    def invoked_as(self, function: str) -> list[dict[str, str]]:
        """How a resource names ``function`` as what it invokes: the function, or one of its
        aliases (AutoPublishAlias: an event source mapping names the alias)."""
        return [{"Ref": function}] + [
            {"Ref": logical}
            for logical, resource in self.resources.items()
            if resource["Type"] == "AWS::Lambda::Alias"
            and resource["Properties"].get("FunctionName") == {"Ref": function}
        ]

    @staticmethod
    def _destination(arn: str, why: str) -> list[Need]:
        service = arn.split(":")[2]
        actions = {
            "lambda": ["lambda:InvokeFunction"],
            "sqs": ["sqs:SendMessage"],
            "sns": ["sns:Publish"],
            "events": ["events:PutEvents"],
        }
        if service not in actions:
            raise ValueError(f"add what Lambda needs to send to {arn}")
        return [Need(action, arn, why) for action in actions[service]]

    # -- the check

    def judge(self, function: str, needs: Sequence[Need]) -> list[Verdict]:
        if function not in self._grants:
            self._grants[function] = self.grants(function)
        grants = self._grants[function]
        verdicts = []
        for need in needs:
            allowed = tuple(
                g for g in grants if g.effect == "Allow" and g.matches(need.action, need.resource)
            )
            denied = tuple(
                g for g in grants if g.effect == "Deny" and g.matches(need.action, need.resource)
            )
            verdicts.append(Verdict(function, need, allowed, denied))
        return verdicts


def resource_label(resource: str, physical: Mapping[str, Mapping[str, str]]) -> str:
    """``resource`` with the longest known ARN in it named as ``${Logical.Arn}`` (an object key
    shortened to its first folder)."""
    best = ""
    label = resource
    for logical, names in physical.items():
        for attribute, value in names.items():
            if value.startswith("arn:") and resource.startswith(value) and len(value) > len(best):
                best = value
                rest = resource[len(value) :]
                if rest.count("/") > 1 and logical == "PayloadBucket":
                    rest = "/" + rest[1:].split("/", 1)[0] + "/…"
                name = logical if attribute == "Ref" else f"{logical}.{attribute}"
                label = f"${{{name}}}{rest}"
    return label


def stack_named_by_ids(translated: Mapping[str, Any], **parameters: str) -> Stack:
    """The translated template under ``parameters``, every resource named after its logical id
    (a function's ARN ends in it; anything else gets an ARN of its own): for checks of the
    template alone, with nothing provisioned."""
    names: dict[str, dict[str, str]] = {}
    for logical, resource in translated["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function":
            names[logical] = {"Ref": logical, "Arn": function_arn(logical)}
            names[f"{logical}Alias{ALIAS}"] = {"Ref": f"{function_arn(logical)}:{ALIAS}"}
        elif resource["Type"] == "AWS::Lambda::LayerVersion":
            # A layer version's Ref is its ARN, which ends in its version number: each
            # LayerVersion resource (SAM names one per content) publishes a version of its own,
            # told apart here by the logical id in that place.
            arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:dependencies:{logical}"
            names[logical] = {"Ref": arn, "Arn": arn}
        elif resource["Type"] != "AWS::Lambda::Alias":  # an alias's Ref is its ARN (above)
            arn = f"arn:aws:test:{REGION}:{ACCOUNT}:{logical}"
            names[logical] = {"Ref": logical, "Arn": arn, "Version": "1", "QueueName": logical}
    return Stack(translated, parameters, names)


# ---------------------------------------------------------------------- resource policies


def statement_applies(
    statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str]
) -> bool:
    """Whether a resolved statement of a resource policy (a bucket policy) for every principal
    covers ``action`` on ``resource`` in a request whose condition keys are ``context``. Only
    ``Bool`` conditions are evaluated; as in IAM, a key the request lacks fails its condition,
    and the keys match case-insensitively. Anything else it cannot evaluate raises."""
    unsupported = {"NotAction", "NotResource", "NotPrincipal"} & set(statement)
    if unsupported:
        raise ValueError(f"the check cannot evaluate {sorted(unsupported)}: {statement!r}")
    if statement.get("Principal") not in ("*", {"AWS": "*"}):
        raise ValueError(f"the check evaluates statements for every principal only: {statement!r}")
    if not any(action_matches(a, action) for a in _strings(statement["Action"])):
        return False
    if not any(resource_matches(r, resource) for r in _strings(statement["Resource"])):
        return False
    keys = {key.lower(): value for key, value in context.items()}
    for operator, tests in statement.get("Condition", {}).items():
        if operator != "Bool":
            raise ValueError(f"the check cannot evaluate the condition operator {operator}")
        for key, expected in tests.items():
            value = keys.get(key.lower())
            if value is None or value.lower() not in {e.lower() for e in _strings(expected)}:
                return False
    return True


def denied_by(
    document: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str]
) -> list[str]:
    """The Sids of the Deny statements of a resolved resource policy that refuse ``action`` on
    ``resource`` for any principal, in a request whose condition keys are ``context``."""
    statements = document.get("Statement", [])
    return [
        str(s.get("Sid", f"#{i}"))
        for i, s in enumerate(statements if isinstance(statements, list) else [statements])
        if s["Effect"] == "Deny" and statement_applies(s, action, resource, context)
    ]
