"""Wiring of the two Lambda functions, built once per cold start by ``handler.py``.

- API function: the FastAPI app behind API Gateway (HTTP API, payload 2.0) through Mangum with
  ``lifespan="off"``; init claims the record in DynamoDB and invokes the worker asynchronously
  before answering 202.
- Worker function: parses the job event, runs :class:`~rollout_sdk.engine.worker.RolloutWorker` with a
  deadline taken from the Lambda's remaining time, and returns a small summary.

Nothing here touches the network at import or construction: boto3 clients connect on first use,
and the server key is read from Secrets Manager (through Powertools Parameters, cached) on the
first request that needs it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.settings import RolloutSettings, load_settings

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider
    from fastapi import FastAPI
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient

    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.dispatch.base import Dispatcher, Job
    from rollout_sdk.engine.record import RolloutRecord
    from rollout_sdk.engine.vault import KeyVault
    from rollout_sdk.engine.worker import RolloutWorker

logger = logging.getLogger("rollout_sdk.lambda")

#: Lambda's hard ceiling on one invocation.
LAMBDA_MAX_TIMEOUT_SECONDS = 900


class LambdaSettings(BaseSettings):
    """What ``template.yaml`` passes to both functions as environment variables."""

    model_config = SettingsConfigDict(extra="ignore")

    agent_loop: str = Field(validation_alias="AGENT_LOOP")
    table_name: str = Field(validation_alias="TABLE_NAME")
    worker_function_name: str | None = Field(None, validation_alias="WORKER_FUNCTION_NAME")
    server_key_secret: str | None = Field(None, validation_alias="SERVER_KEY_SECRET_ARN")
    payload_bucket: str | None = Field(None, validation_alias="PAYLOAD_BUCKET")
    #: "direct": one asynchronous worker invocation per rollout; "queue": an SQS queue whose
    #: batches one worker invocation runs together.
    hand_off: Literal["direct", "queue"] = Field("direct", validation_alias="HAND_OFF")
    queue_url: str | None = Field(None, validation_alias="QUEUE_URL")
    callback_key_kms_key_id: str | None = Field(None, validation_alias="CALLBACK_KEY_KMS_KEY_ID")
    worker_timeout_seconds: float = Field(
        LAMBDA_MAX_TIMEOUT_SECONDS,
        gt=0,
        le=LAMBDA_MAX_TIMEOUT_SECONDS,
        validation_alias="WORKER_TIMEOUT_SECONDS",
    )
    deadline_margin_seconds: float = Field(
        10.0, ge=0, le=300, validation_alias="DEADLINE_MARGIN_SECONDS"
    )
    secret_max_age_seconds: int = Field(
        300, ge=0, le=86400, validation_alias="SECRET_MAX_AGE_SECONDS"
    )
    endpoint_url: str | None = Field(None, validation_alias="ROLLOUT_SDK_AWS_ENDPOINT_URL")
    enable_docs: bool = Field(False, validation_alias="ROLLOUT_SDK_ENABLE_DOCS")


def load_lambda_settings() -> LambdaSettings:
    """Read the Lambda settings; ConfigurationError naming each missing or bad variable."""
    try:
        return LambdaSettings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err.get("loc") else "?"
            problems.append(f"{field}: {err.get('msg')}")
        raise ConfigurationError(
            "invalid Lambda environment (set by template.yaml):\n  " + "\n  ".join(problems)
        ) from exc


def check_deadlines(settings: RolloutSettings, lambda_settings: LambdaSettings) -> None:
    """Refuse a rollout deadline the worker function cannot honour."""
    budget = lambda_settings.worker_timeout_seconds - lambda_settings.deadline_margin_seconds
    requested = settings.server.request_timeout_seconds
    if requested > budget:
        raise ConfigurationError(
            f"OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS is {requested:g} s, but the worker "
            f"function times out after {lambda_settings.worker_timeout_seconds:g} s "
            f"(WorkerTimeout) and keeps {lambda_settings.deadline_margin_seconds:g} s "
            f"(DEADLINE_MARGIN_SECONDS) to report: at most {budget:g} s fits. Lower the request "
            "timeout, or see docs/aws.md for rollouts longer than 15 minutes."
        )


def parse_server_keys(secret: str | None) -> list[str]:
    """Server keys from a secret value: one key, a JSON list of keys, or ``{"keys": [...]}``.

    Several keys may be valid at once, so a key can be rotated without downtime. An empty or
    blank secret is a ConfigurationError: the server must never run open by accident.
    """
    text = (secret or "").strip()
    if not text:
        raise ConfigurationError("the server-key secret is empty; put the server key in it")
    if text.startswith(("[", "{")):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"the server-key secret is not valid JSON: {exc.msg}") from exc
        keys = value.get("keys") if isinstance(value, dict) else value
        if (
            not isinstance(keys, list)
            or not keys
            or not all(isinstance(k, str) and k.strip() for k in keys)
        ):
            raise ConfigurationError(
                "the server-key secret must be a key, a non-empty JSON list of keys, or "
                '{"keys": [...]}, with no blank key'
            )
        return [k.strip() for k in keys]
    return [text]


class AwsClients:
    """boto3 clients, each built on first use (building one reads no network).

    ``endpoint_url`` points every client at an emulator (moto's server) for local runs and tests.
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

        return boto3.client("dynamodb", endpoint_url=self.endpoint_url, config=self.config)

    @cached_property
    def s3(self) -> S3Client:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, config=self.config)

    @cached_property
    def lambda_(self) -> LambdaClient:
        import boto3

        return boto3.client("lambda", endpoint_url=self.endpoint_url, config=self.config)

    @cached_property
    def kms(self) -> KMSClient:
        import boto3

        return boto3.client("kms", endpoint_url=self.endpoint_url, config=self.config)

    @cached_property
    def sqs(self) -> SQSClient:
        import boto3

        return boto3.client("sqs", endpoint_url=self.endpoint_url, config=self.config)

    @cached_property
    def secretsmanager(self) -> SecretsManagerClient:
        import boto3

        return boto3.client("secretsmanager", endpoint_url=self.endpoint_url, config=self.config)


class LambdaRuntime:
    """The objects both functions share within one execution environment."""

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        *,
        settings: RolloutSettings,
        lambda_settings: LambdaSettings,
        clients: AwsClients,
        secret_reader: Callable[[str, int], str] | None = None,
    ) -> None:
        check_deadlines(settings, lambda_settings)
        self.agent_loop = agent_loop
        self.settings = settings
        self.lambda_settings = lambda_settings
        self.clients = clients
        self._secret_reader = secret_reader
        # One event loop for the environment's life: the shared TrainGate client's connections
        # belong to it, and Mangum runs on the current loop.
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)

    @classmethod
    def from_environment(cls, *, clients: AwsClients | None = None) -> LambdaRuntime:
        """Build from the environment ``template.yaml`` sets. Raises ConfigurationError."""
        from rollout_sdk.agent.loader import load_agent_loop
        from rollout_sdk.agent.validation import validate_agent_loop

        lambda_settings = load_lambda_settings()
        settings = load_settings()
        agent_loop = load_agent_loop(lambda_settings.agent_loop)
        validate_agent_loop(agent_loop).raise_if_invalid()
        clients = clients or AwsClients(
            endpoint_url=lambda_settings.endpoint_url,
            max_pool_connections=max(10, settings.server.max_concurrent_rollouts),
        )
        return cls(
            agent_loop,
            settings=settings,
            lambda_settings=lambda_settings,
            clients=clients,
        )

    # ------------------------------------------------------------------ shared pieces

    @cached_property
    def store(self) -> Any:
        """The DynamoDB store (large values in the payload bucket)."""
        from rollout_sdk.store.dynamodb import DynamoDBStore

        bucket = self.lambda_settings.payload_bucket
        return DynamoDBStore(
            self.lambda_settings.table_name,
            client=self.clients.dynamodb,
            s3=(lambda: self.clients.s3) if bucket else None,
            bucket=bucket,
        )

    @cached_property
    def client(self) -> Any:
        """The process's one TrainGate client."""
        from rollout_sdk.engine.client import TrainGateClient

        return TrainGateClient(self.settings.client)

    def server_keys(self) -> list[str]:
        """The valid server keys, from the secret (cached by Powertools for max-age seconds)."""
        name = self.lambda_settings.server_key_secret
        if not name:
            return []
        reader = self._secret_reader or self._read_secret
        return parse_server_keys(reader(name, self.lambda_settings.secret_max_age_seconds))

    @cached_property
    def _secrets(self) -> SecretsProvider:
        """Powertools' secrets provider (its cache lives as long as this environment)."""
        from aws_lambda_powertools.utilities.parameters import SecretsProvider

        return SecretsProvider(boto3_client=self.clients.secretsmanager)

    def _read_secret(self, name: str, max_age: int) -> str:
        value = self._secrets.get(name, max_age=max_age)
        if isinstance(value, bytes):
            return value.decode()
        if not isinstance(value, str):
            raise ConfigurationError(f"secret {name} is not a string")
        return value

    # ------------------------------------------------------------------ API function

    @cached_property
    def app(self) -> FastAPI:
        """The same app the local server runs, on DynamoDB and the Lambda dispatcher."""
        from rollout_sdk.http.app import create_app

        return create_app(
            self.agent_loop,
            settings=self.settings,
            store=self.store,
            dispatcher=self.dispatcher,
            client=self.client,
            key_provider=self.server_keys,
            docs=self.lambda_settings.enable_docs,
            # Nothing may run after a Lambda response: no timers. The re-drive and the failure
            # destination are functions of their own, and the key is sealed only when parked.
            vault=self.vault,
            seal_at_init=False,
            sweep_on_start=False,
            redrive=False,
        )

    @cached_property
    def dispatcher(self) -> Dispatcher:
        """The hand-off the template chose: an asynchronous invoke, or the rollout queue."""
        from rollout_sdk.dispatch.aws_lambda import LambdaDispatcher
        from rollout_sdk.dispatch.sqs import SqsDispatcher

        if self.lambda_settings.hand_off == "queue":
            if not self.lambda_settings.queue_url:
                raise ConfigurationError("HAND_OFF is queue but QUEUE_URL is not set")
            return SqsDispatcher(self.lambda_settings.queue_url, client=self.clients.sqs)
        function = self.lambda_settings.worker_function_name
        if not function:
            raise ConfigurationError("WORKER_FUNCTION_NAME is not set (template.yaml sets it)")
        return LambdaDispatcher(function, client=self.clients.lambda_)

    @cached_property
    def api_handler(self) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
        """The API function's handler: Mangum around the app, lifespan off."""
        from mangum import Mangum

        handler: Callable[[dict[str, Any], Any], dict[str, Any]] = Mangum(self.app, lifespan="off")
        return handler

    def close(self) -> None:
        """Close the TrainGate client and the event loop (tests; Lambda just freezes)."""
        if "client" in self.__dict__:
            self.loop.run_until_complete(self.client.aclose())
        self.loop.close()

    # ------------------------------------------------------------------ worker function

    @cached_property
    def worker(self) -> RolloutWorker:
        """The worker, on the same store and client."""
        from rollout_sdk.engine.worker import RolloutWorker

        return RolloutWorker(
            self.agent_loop, self.store, self.client, self.settings, vault=self.vault
        )

    @cached_property
    def vault(self) -> KeyVault | None:
        """KMS, for callback keys of responses parked for re-drive (CALLBACK_KEY_KMS_KEY_ID)."""
        from rollout_sdk.engine.vault import KmsVault

        key_id = self.lambda_settings.callback_key_kms_key_id
        return KmsVault(key_id, client=lambda: self.clients.kms) if key_id else None

    def handle_worker(self, event: Any, context: Any) -> dict[str, Any]:
        """Run the rollout named by ``event``; a second delivery of the same event runs nothing."""
        from rollout_sdk.dispatch.aws_lambda import job_from_event

        try:
            job = job_from_event(event)
        except ValueError as exc:
            # Retrying a malformed event cannot help: report and return, do not raise.
            logger.error("malformed worker event: %s", exc)
            return {"status": "rejected", "error": str(exc)}
        record = self.loop.run_until_complete(
            self.worker.run(job, deadline_seconds=self._deadline(context))
        )
        if record is None:
            return {"status": "skipped", "rollout_id": job.rollout_id}
        return {
            "status": "done",
            "rollout_id": job.rollout_id,
            "state": record.state.value,
            "delivered": record.delivered_at is not None,
        }

    # ------------------------------------------------------------------ recovery functions

    def _deadline(self, context: Any) -> float | None:
        if context is None or not hasattr(context, "get_remaining_time_in_millis"):
            return None
        remaining = float(context.get_remaining_time_in_millis()) / 1000
        return max(0.0, remaining - self.lambda_settings.deadline_margin_seconds)

    def handle_worker_batch(self, event: Any, context: Any) -> dict[str, Any]:
        """The queue worker: run every rollout of an SQS batch concurrently in this invocation.

        Answers a partial-batch failure report: a message is reported failed (and redelivered
        after its visibility timeout) only when the kit could not settle its rollout; a redelivery
        finds the record claimed or finished and does nothing twice. A malformed message is logged
        and dropped: retrying cannot fix it.
        """
        from rollout_sdk.dispatch.aws_lambda import job_from_event

        records = event.get("Records", []) if isinstance(event, dict) else []
        jobs: list[tuple[str, Job]] = []
        for message in records:
            message_id = str(message.get("messageId", ""))
            try:
                jobs.append((message_id, job_from_event(json.loads(message.get("body") or ""))))
            except (ValueError, TypeError) as exc:
                logger.error("malformed queue message %s dropped: %s", message_id, exc)
        deadline = self._deadline(context)

        async def run_all() -> list[BaseException | RolloutRecord | None]:
            return await asyncio.gather(
                *(self.worker.run(job, deadline_seconds=deadline) for _, job in jobs),
                return_exceptions=True,
            )

        outcomes = self.loop.run_until_complete(run_all())
        failures = []
        for (message_id, job), outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                logger.error(
                    "rollout not settled; the message will be redelivered",
                    extra={"rollout_id": job.rollout_id, "error": str(outcome)},
                )
                failures.append({"itemIdentifier": message_id})
        return {"batchItemFailures": failures}

    def handle_dead_letters(self, event: Any, context: Any) -> dict[str, Any]:
        """Messages the rollout queue gave up on (its dead-letter queue): report each rollout
        once, with its stored response or an ERROR, as the on-failure destination does."""
        from rollout_sdk.dispatch.aws_lambda import job_from_event

        settled = []
        for message in event.get("Records", []) if isinstance(event, dict) else []:
            try:
                job = job_from_event(json.loads(message.get("body") or ""))
            except (ValueError, TypeError) as exc:
                logger.error("malformed dead letter dropped: %s", exc)
                continue
            receives = (message.get("attributes") or {}).get("ApproximateReceiveCount", "?")
            reason = f"the queued rollout failed {receives} times (dead-letter queue)"
            record = self.loop.run_until_complete(self.worker.report_failed_job(job, reason=reason))
            settled.append(
                {"rollout_id": job.rollout_id, "state": record.state.value if record else "absent"}
            )
        return {"status": "settled", "rollouts": settled}

    def handle_worker_failure(self, event: Any, context: Any) -> dict[str, Any]:
        """The worker's on-failure destination: Lambda gave up on a worker event (retries
        exhausted, or the event aged out). Send the stored response, or an ERROR naming the
        failure, once; the record says it was settled here."""
        from rollout_sdk.dispatch.aws_lambda import failure_from_event

        try:
            job, reason = failure_from_event(event)
        except ValueError as exc:
            logger.error("malformed failure record: %s", exc)
            return {"status": "rejected", "error": str(exc)}
        record = self.loop.run_until_complete(self.worker.report_failed_job(job, reason=reason))
        return {
            "status": "settled",
            "rollout_id": job.rollout_id,
            "state": record.state.value if record else "absent",
        }

    def handle_redrive(self, event: Any, context: Any) -> dict[str, Any]:
        """The scheduled re-drive: send parked responses again."""
        from rollout_sdk.engine.recovery import Recovery

        report = self.loop.run_until_complete(Recovery(self.worker).redrive())
        return {
            "status": "done",
            "examined": report.examined,
            "delivered": len(report.delivered),
            "parked": len(report.parked),
            "undeliverable": len(report.undeliverable),
            "failed": len(report.failed),
        }
