"""The Lambda functions' boto3 clients, each built on first use: boto3 and botocore's endpoint
data are imported then, inside the property, so a function that never calls a service does not
pay for that service's client at its cold start."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from rollout_sdk.aws.metering import instrument

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient


class AwsClients:
    """boto3 clients, each built on first use (building one reads no network).

    Credentials and region come from the function's environment, as on Lambda;
    ``endpoint_url`` points every client at an emulator (moto's server) for local runs and tests.
    Each client's requests are counted into the cost estimate of the rollout that makes them
    (:func:`rollout_sdk.aws.metering.instrument`).
    """

    def __init__(self, *, endpoint_url: str | None = None, max_pool_connections: int = 10) -> None:
        from botocore.config import Config

        self.endpoint_url = endpoint_url
        self.config = Config(
            max_pool_connections=max_pool_connections,
            retries={"mode": "standard", "max_attempts": 4},
            connect_timeout=5,
            read_timeout=30,
        )

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        import boto3

        return instrument(
            boto3.client("dynamodb", endpoint_url=self.endpoint_url, config=self.config)
        )

    @cached_property
    def s3(self) -> S3Client:
        import boto3

        return instrument(boto3.client("s3", endpoint_url=self.endpoint_url, config=self.config))

    @cached_property
    def lambda_(self) -> LambdaClient:
        import boto3

        return instrument(
            boto3.client("lambda", endpoint_url=self.endpoint_url, config=self.config)
        )

    @cached_property
    def kms(self) -> KMSClient:
        import boto3

        return instrument(boto3.client("kms", endpoint_url=self.endpoint_url, config=self.config))

    @cached_property
    def sqs(self) -> SQSClient:
        import boto3

        return instrument(boto3.client("sqs", endpoint_url=self.endpoint_url, config=self.config))

    @cached_property
    def secretsmanager(self) -> SecretsManagerClient:
        import boto3

        return instrument(
            boto3.client("secretsmanager", endpoint_url=self.endpoint_url, config=self.config)
        )
