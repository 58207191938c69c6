"""The Lambda functions' boto3 clients, each built on first use: boto3 and botocore's endpoint
data are imported then, on first access, so a function that never calls a service does not
pay for that service's client at its cold start.

With ``botocore_data`` (the template sets ``ROLLOUT_SDK_BOTOCORE_DATA`` to the dependency
layer's ``/opt/botocore-data``, which ``infra/botocore_data.py`` builds), the clients share a
session of their own whose loader reads that folder alone: botocore's data of the services
below (and STS), its endpoint file cut to them, 44 KB instead of 1.2 MB to parse at the first
client, and 7 service folders to list instead of 445 for each kind of model file. Only when
the running botocore is the version the folder was built from (its ``BOTOCORE_VERSION``);
otherwise, and without it, the clients come from boto3's default session, as an agent's own
clients do (a client of another service cannot come from the kit's session).
"""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from rollout_sdk.aws.metering import instrument

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient

logger = logging.getLogger("rollout_sdk.aws.clients")

C = TypeVar("C")
#: The services the functions call.
Service = Literal["dynamodb", "s3", "lambda", "kms", "sqs", "secretsmanager"]
#: The operations the functions call on each, by botocore's names: the store (and its due-index
#: backfill), the payload bucket, the hand-off and the durable execution SDK's checkpoints
#: (``aws_durable_execution_sdk_python.lambda_service``), the callback key's vault, the queue
#: hand-off, and Powertools' secret read. ``infra/botocore_data.py`` cuts each service's model
#: to these (a client on that folder has no other method); ``tests/aws/test_permissions.py``
#: checks that every call each function makes, on every path it runs, is among them.
OPERATIONS: dict[Service, tuple[str, ...]] = {
    "dynamodb": (
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "TransactWriteItems",
    ),
    "s3": ("PutObject", "GetObject"),
    "lambda": ("Invoke", "CheckpointDurableExecution", "GetDurableExecutionState"),
    "kms": ("Encrypt", "Decrypt"),
    "sqs": ("SendMessage",),
    "secretsmanager": ("GetSecretValue",),
}


class _Client(Generic[C]):
    """The boto3 client of ``service``, built on first access and kept on the instance (as
    ``functools.cached_property`` keeps a value: later reads find it in the instance's dict)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.name: str = service

    def __set_name__(self, owner: type[AwsClients], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, clients: None, owner: type[AwsClients]) -> _Client[C]: ...

    @overload
    def __get__(self, clients: AwsClients, owner: type[AwsClients]) -> C: ...

    def __get__(self, clients: AwsClients | None, owner: type[AwsClients]) -> Any:
        if clients is None:
            return self
        client = instrument(
            clients.session.client(
                self.service, endpoint_url=clients.endpoint_url, config=clients.config
            )
        )
        clients.__dict__[self.name] = client
        return client


class AwsClients:
    """boto3 clients, each built on first use (building one reads no network).

    Credentials and region come from the function's environment, as on Lambda;
    ``endpoint_url`` points every client at an emulator (moto's server) for local runs and tests.
    Each client's requests are counted into the cost estimate of the rollout that makes them
    (:func:`rollout_sdk.aws.metering.instrument`).
    """

    dynamodb: _Client[DynamoDBClient] = _Client("dynamodb")
    s3: _Client[S3Client] = _Client("s3")
    lambda_: _Client[LambdaClient] = _Client("lambda")
    kms: _Client[KMSClient] = _Client("kms")
    sqs: _Client[SQSClient] = _Client("sqs")
    secretsmanager: _Client[SecretsManagerClient] = _Client("secretsmanager")

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        max_pool_connections: int = 10,
        botocore_data: str | Path | None = None,
    ) -> None:
        from botocore.config import Config

        self.endpoint_url = endpoint_url
        self.botocore_data = None if botocore_data is None else Path(botocore_data)
        self.config = Config(
            max_pool_connections=max_pool_connections,
            retries={"mode": "standard", "max_attempts": 4},
            connect_timeout=5,
            read_timeout=30,
        )

    @cached_property
    def session(self) -> boto3.Session:
        """The session every client comes from: the kit's own over the trimmed endpoint data
        when :func:`usable_botocore_data` admits it, else boto3's default session."""
        import boto3

        data = usable_botocore_data(self.botocore_data, say=True)
        if data is None:
            if boto3.DEFAULT_SESSION is None:
                boto3.setup_default_session()
            return boto3.DEFAULT_SESSION or boto3.Session()  # set just above
        import botocore.session
        from botocore.loaders import Loader

        core = botocore.session.get_session()
        # The folder alone: botocore's own data folder (every service) is not searched.
        core.register_component(
            "data_loader",
            Loader(extra_search_paths=[str(data)], include_default_search_paths=False),
        )
        return boto3.Session(botocore_session=core)


#: The file of a trimmed data folder naming the botocore it was built from
#: (``infra/botocore_data.py``).
BOTOCORE_VERSION_FILE = "BOTOCORE_VERSION"


def usable_botocore_data(folder: Path | None, *, say: bool = False) -> Path | None:
    """``folder`` when it holds trimmed endpoint data built from the running botocore's own
    version, else None (no folder, no version file, or another botocore: its own data then).
    With ``say``, a folder that is there but not used is logged once, with the build variable
    that makes it match (the runtime's botocore is the Lambda runtime's, not the kit's pin)."""
    if folder is None:
        return None
    import botocore

    try:
        built_from = (folder / BOTOCORE_VERSION_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if built_from == botocore.__version__:
        return folder
    if say:
        logger.info(
            "botocore data in %s is for botocore %s, and this runtime has botocore %s: the kit's "
            "clients read botocore's own data (a slower cold start); build with "
            'LAMBDA_BOTOCORE=%s (docs/aws.md, "The dependency layer")',
            folder,
            built_from,
            botocore.__version__,
            botocore.__version__,
        )
    return None
