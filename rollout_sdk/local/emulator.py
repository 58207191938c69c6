"""The AWS path on one machine: an embedded moto server on 127.0.0.1, provisioned from
``template.yaml``, so the real DynamoDB and Lambda code runs with no AWS account and no Docker.
(The server runs in a child process that stops with this one: see :class:`EmbeddedMoto`.)

Used by ``rollout-sdk serve --store dynamodb``, ``rollout-sdk invoke`` and the tests. moto is a
development dependency (the extra ``local``); it is imported only here.

Every client here comes from :func:`local_session`: fake credentials, the local region, and no
profile or AWS config file, all given to the session itself, so nothing here can reach real AWS
and nothing here writes the process's environment.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.project import install_hint
from rollout_sdk.testing.lifecycle import StartStop

DEFAULT_TEMPLATE = Path("template.yaml")
LOCAL_REGION = "us-east-1"
TABLE_RESOURCE = "RolloutTable"

FAKE_SECRET = "testing"  # noqa: S105 - moto accepts any credentials; these sign nothing real

#: What Lambda puts in every function's environment (credentials and region), faked: part of
#: :attr:`LocalResources.environment`, for the functions ``handler.py`` runs locally.
FAKE_FUNCTION_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": FAKE_SECRET,
    "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
    "AWS_SESSION_TOKEN": FAKE_SECRET,
    "AWS_DEFAULT_REGION": LOCAL_REGION,
    "AWS_REGION": LOCAL_REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}

#: A whole process's fake-AWS environment: those credentials, and no config or credentials file
#: (with no profile either: callers drop every other ``AWS_*`` variable). The embedded emulator's
#: process runs in it; the repo's test kit starts its children in it too.
FAKE_AWS_ENVIRONMENT = {
    **FAKE_FUNCTION_CREDENTIALS,
    "AWS_SECURITY_TOKEN": FAKE_SECRET,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def local_session() -> Any:
    """A boto3 session for an emulator: fake credentials and the local region, with no profile,
    config or credentials file read, all set on the session alone (not the environment).

    With credentials given, boto3 never searches for others (no ``~/.aws``, no instance
    metadata), so a client of this session cannot sign a request for a real account.
    """
    import boto3
    import botocore.session

    core = botocore.session.Session()
    # On the config store, not the session: a session variable set to None falls back to the
    # environment (AWS_PROFILE), an override does not.
    store = core.get_component("config_store")
    for name, value in (
        ("profile", None),
        ("config_file", os.devnull),
        ("credentials_file", os.devnull),
    ):
        store.set_config_variable(name, value)
    return boto3.session.Session(
        aws_access_key_id=FAKE_SECRET,
        aws_secret_access_key=FAKE_SECRET,
        aws_session_token=FAKE_SECRET,
        region_name=LOCAL_REGION,
        botocore_session=core,
    )


def local_client(service: str, endpoint_url: str, *, max_pool_connections: int = 10) -> Any:
    """A client of :func:`local_session` for ``service`` at ``endpoint_url`` (the retries and
    timeouts the Lambda functions' clients use)."""
    from botocore.config import Config

    config = Config(
        max_pool_connections=max_pool_connections,
        retries={"mode": "standard", "max_attempts": 4},
        connect_timeout=5,
        read_timeout=30,
    )
    return local_session().client(service, endpoint_url=endpoint_url, config=config)


def load_template(path: str | Path = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """Parse a SAM/CloudFormation template, keeping intrinsic tags (``!Ref``) as plain data."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - PyYAML comes with moto
        raise ConfigurationError("reading template.yaml needs PyYAML: pip install pyyaml") from exc

    class _Loader(yaml.SafeLoader):
        pass

    def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        elif isinstance(node, yaml.MappingNode):
            value = loader.construct_mapping(node, deep=True)
        else:  # pragma: no cover - YAML has no other node kinds
            raise ConfigurationError(f"unexpected YAML node {node!r}")
        return {f"Fn::{suffix}" if suffix != "Ref" else "Ref": value}

    _Loader.add_multi_constructor("!", _tag)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the template {path}: {exc}") from exc
    data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    if not isinstance(data, dict) or "Resources" not in data:
        raise ConfigurationError(f"{path} is not a SAM template (no Resources)")
    return data


def table_definition(template: dict[str, Any], table_name: str) -> dict[str, Any]:
    """``CreateTable`` arguments for the template's rollout table, so tests and the deployed
    table cannot disagree."""
    try:
        props = template["Resources"][TABLE_RESOURCE]["Properties"]
    except KeyError as exc:
        raise ConfigurationError(f"template has no {TABLE_RESOURCE} resource") from exc
    definition = {
        "TableName": table_name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        definition["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    return definition


def ttl_attribute(template: dict[str, Any]) -> str:
    """The TTL attribute the template enables."""
    spec = template["Resources"][TABLE_RESOURCE]["Properties"]["TimeToLiveSpecification"]
    return str(spec["AttributeName"])


class EmbeddedMoto(StartStop):
    """moto's server on 127.0.0.1 (a free port), Lambda set to echo invokes without Docker.

    It runs in a child process (:mod:`rollout_sdk.local.moto_process`) with a fake-AWS
    environment of its own, so the caller's environment is neither read by moto nor changed for
    it, and it stops when this process exits, however it exits.
    """

    #: How long the child may take to import moto and start serving.
    START_TIMEOUT = 60.0

    def __init__(self, *, port: int = 0) -> None:
        import importlib.util

        if importlib.util.find_spec("moto") is None:
            raise ConfigurationError(
                f"the embedded AWS emulator needs moto: {install_hint('local')} "
                "(or use --dynamodb-endpoint URL)"
            )
        self.port = port
        self.endpoint_url = ""
        self._process: subprocess.Popen[str] | None = None
        self._errors: IO[str] | None = None

    @staticmethod
    def environment() -> dict[str, str]:
        """The child's environment: this one's without any AWS variable, plus fake credentials
        and the local region (moto reads them; nothing it holds is real)."""
        own = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return {**own, **FAKE_AWS_ENVIRONMENT}

    def start(self) -> EmbeddedMoto:
        """Start the child, wait until it serves, and configure it."""
        import select
        import tempfile

        # Its errors go to a file, not a pipe: a pipe nobody reads would fill and stall moto.
        # It lives as long as the emulator: stop() closes it.
        self._errors = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
        process = subprocess.Popen(  # noqa: S603 - this interpreter, a module of the kit
            [sys.executable, "-m", "rollout_sdk.local.moto_process", str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            env=self.environment(),
            text=True,
        )
        self._process = process
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], self.START_TIMEOUT)
            line = process.stdout.readline() if ready else ""
            if not line.startswith("{"):
                raise ConfigurationError(f"the embedded AWS emulator did not start{self._error()}")
            self.endpoint_url = f"http://127.0.0.1:{json.loads(line)['port']}"
            body = json.dumps({"lambda": {"use_docker": False}}).encode()
            request = urllib.request.Request(  # noqa: S310 - loopback URL we just started
                f"{self.endpoint_url}/moto-api/config", data=body, method="POST"
            )
            with urllib.request.urlopen(request, timeout=10):  # noqa: S310
                pass
        except BaseException:
            self.stop()  # nothing outlives a failed start: not the child, not its pipes
            raise
        return self

    def stop(self) -> None:
        """Stop the server (its data is gone); safe to call more than once."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the child stops when its standard input closes
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
        if self._errors is not None:
            self._errors.close()
            self._errors = None

    def _error(self) -> str:
        """The last line the child wrote to its error output, as ": line", or ""."""
        if self._errors is None:
            return ""
        self._errors.seek(0)
        lines = self._errors.read().strip().splitlines()
        return f": {lines[-1]}" if lines else ""

    @property
    def pid(self) -> int | None:
        """The emulator process's id while it runs."""
        return self._process.pid if self._process is not None else None


@dataclass
class LocalResources:
    """What :func:`provision` created, and the environment ``handler.py`` needs to use it (the
    functions' variables, and fake credentials where Lambda would put real ones)."""

    endpoint_url: str
    table_name: str
    bucket: str
    secret_arn: str
    server_key: str
    worker_function: str
    kms_key_id: str
    queue_url: str
    environment: dict[str, str] = field(default_factory=dict)


def _dummy_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def worker(event, context):\n    return event\n")
    return buffer.getvalue()


def _published_alias(lam: Any, function: str, template: dict[str, Any]) -> str | None:
    """The ARN of ``function``'s alias named as the template's Globals ``AutoPublishAlias``,
    published if missing; None when the template publishes no alias."""
    name = template.get("Globals", {}).get("Function", {}).get("AutoPublishAlias")
    if not isinstance(name, str):
        return None
    try:
        return str(lam.get_alias(FunctionName=function, Name=name)["AliasArn"])
    except lam.exceptions.ResourceNotFoundException:
        version = lam.publish_version(FunctionName=function)["Version"]
        return str(
            lam.create_alias(FunctionName=function, Name=name, FunctionVersion=version)["AliasArn"]
        )


def _ensure_table(ddb: Any, template: dict[str, Any], table: str, *, ttl_optional: bool) -> None:
    """Create the template's rollout table (with TTL) named ``table``, if it is missing;
    ``ttl_optional``: an endpoint with no TTL is tolerated (reads ignore expired records)."""
    # Asked by name: list_tables answers 100 names a page, and an endpoint may hold more.
    try:
        ddb.describe_table(TableName=table)
        return
    except ddb.exceptions.ResourceNotFoundException:
        pass
    ddb.create_table(**table_definition(template, table))
    try:
        ddb.update_time_to_live(
            TableName=table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl_attribute(template)},
        )
    except ddb.exceptions.ClientError:
        if not ttl_optional:
            raise


def provision_table(
    endpoint_url: str,
    *,
    template_path: str | Path = DEFAULT_TEMPLATE,
    table_name: str = "rollout-sdk-local-rollouts",
) -> str:
    """Create the template's rollout table (with TTL) on a DynamoDB-compatible endpoint, if it is
    missing; nothing else is created there. Returns the table name."""
    template = load_template(template_path)
    ddb = local_session().client("dynamodb", endpoint_url=endpoint_url)
    # Some emulators have no TTL; reads ignore expired records anyway.
    _ensure_table(ddb, template, table_name, ttl_optional=True)
    return table_name


def _ensure_secret(sm: Any, name: str, value: str) -> str:
    """The ARN of the secret ``name``, created or set to ``value``."""
    try:
        return str(sm.create_secret(Name=name, SecretString=value)["ARN"])
    except sm.exceptions.ResourceExistsException:
        arn = str(sm.describe_secret(SecretId=name)["ARN"])
        sm.put_secret_value(SecretId=name, SecretString=value)
        return arn


def _ensure_worker(lam: Any, iam: Any, function: str, role_name: str) -> None:
    """Create the worker function ``function`` (a dummy package moto echoes), if missing."""
    try:
        lam.get_function(FunctionName=function)
    except lam.exceptions.ResourceNotFoundException:
        role = iam.create_role(
            RoleName=role_name,
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        )["Role"]["Arn"]
        lam.create_function(
            FunctionName=function,
            Runtime="python3.13",
            Role=role,
            Handler="handler.worker",
            Code={"ZipFile": _dummy_zip()},
        )


def _ensure_kms_key(kms: Any, alias: str) -> str:
    """The id of the KMS key behind ``alias``, created with the alias if missing."""
    aliases = {a["AliasName"]: a.get("TargetKeyId") for a in kms.list_aliases()["Aliases"]}
    key_id = aliases.get(alias)
    if key_id is None:
        key_id = kms.create_key(Description="rollout-sdk local callback keys")["KeyMetadata"][
            "KeyId"
        ]
        kms.create_alias(AliasName=alias, TargetKeyId=key_id)
    return str(key_id)


def _ensure_queues(sqs: Any, prefix: str) -> str:
    """The rollout queue's URL, with its dead-letter queue (as template.yaml sets them up)."""
    dead_letters = sqs.create_queue(QueueName=f"{prefix}-dead-letters")["QueueUrl"]
    dead_letters_arn = sqs.get_queue_attributes(QueueUrl=dead_letters, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    return str(
        sqs.create_queue(
            QueueName=f"{prefix}-rollouts",
            Attributes={
                "VisibilityTimeout": "960",
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dead_letters_arn, "maxReceiveCount": "3"}
                ),
            },
        )["QueueUrl"]
    )


def provision(
    endpoint_url: str,
    *,
    template_path: str | Path = DEFAULT_TEMPLATE,
    agent_loop: str | None = None,
    server_key: str | None = None,
    prefix: str = "rollout-sdk-local",
) -> LocalResources:
    """Create the template's table (with TTL), the payload bucket, the server-key secret and a
    worker function that moto echoes, on the emulator at ``endpoint_url``. Idempotent."""
    template = load_template(template_path)
    session = local_session()
    table = f"{prefix}-rollouts"
    _ensure_table(
        session.client("dynamodb", endpoint_url=endpoint_url), template, table, ttl_optional=False
    )
    bucket = f"{prefix}-payloads"
    session.client("s3", endpoint_url=endpoint_url).create_bucket(Bucket=bucket)
    key = server_key or secrets.token_urlsafe(24)
    sm = session.client("secretsmanager", endpoint_url=endpoint_url)
    secret_arn = _ensure_secret(sm, f"{prefix}-server-key", key)
    function = f"{prefix}-worker"
    lam = session.client("lambda", endpoint_url=endpoint_url)
    iam = session.client("iam", endpoint_url=endpoint_url)
    _ensure_worker(lam, iam, function, f"{prefix}-worker-role")
    # The template publishes every function behind an alias and the API invokes the worker's
    # alias ARN (SnapStart applies to published versions only): do the same here.
    invoked = _published_alias(lam, function, template) or function
    kms = session.client("kms", endpoint_url=endpoint_url)
    kms_key_id = _ensure_kms_key(kms, f"alias/{prefix}-callback-keys")
    queue_url = _ensure_queues(session.client("sqs", endpoint_url=endpoint_url), prefix)
    environment = {
        **FAKE_FUNCTION_CREDENTIALS,
        "QUEUE_URL": queue_url,
        "CALLBACK_KEY_KMS_KEY_ID": kms_key_id,
        "TABLE_NAME": table,
        "PAYLOAD_BUCKET": bucket,
        "SERVER_KEY_SECRET_ARN": secret_arn,
        "WORKER_FUNCTION_NAME": invoked,
        "ROLLOUT_SDK_AWS_ENDPOINT_URL": endpoint_url,
        "POWERTOOLS_SERVICE_NAME": "rollout-sdk",
        "POWERTOOLS_METRICS_NAMESPACE": "RolloutSdkLocal",
    }
    if agent_loop:
        environment["AGENT_LOOP"] = agent_loop
    return LocalResources(
        endpoint_url=endpoint_url,
        table_name=table,
        bucket=bucket,
        secret_arn=secret_arn,
        server_key=key,
        worker_function=function,
        kms_key_id=kms_key_id,
        queue_url=queue_url,
        environment=environment,
    )
