"""The Lambda functions' boto3 clients, each built on first use: boto3 and botocore's endpoint
data are imported then, on first access, so a function that never calls a service does not
pay for that service's client at its cold start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from rollout_sdk.aws.metering import instrument

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient

C = TypeVar("C")
#: The services the functions call.
Service = Literal["dynamodb", "s3", "lambda", "kms", "sqs", "secretsmanager"]


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
        import boto3

        client = instrument(
            boto3.client(self.service, endpoint_url=clients.endpoint_url, config=clients.config)
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

    def __init__(self, *, endpoint_url: str | None = None, max_pool_connections: int = 10) -> None:
        from botocore.config import Config

        self.endpoint_url = endpoint_url
        self.config = Config(
            max_pool_connections=max_pool_connections,
            retries={"mode": "standard", "max_attempts": 4},
            connect_timeout=5,
            read_timeout=30,
        )
