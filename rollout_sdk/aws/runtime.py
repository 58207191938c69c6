"""The composition root of the Lambda functions: built once per cold start by ``handler.py``.

It checks the environment ``template.yaml`` sets, loads the agent loop, and builds, on first use,
the collaborators every handler in :mod:`rollout_sdk.aws.handlers` shares: the DynamoDB store,
the TrainGate client, the callback-key vault, the dispatcher, the worker, the app, and the one
event loop they all run on.

Nothing here touches the network at import or construction: boto3 clients connect on first use,
and the server key is read from Secrets Manager (through Powertools Parameters, cached) on the
first request that needs it.

Every piece is a cached property that imports its module when first built: a function's cold
start loads only what its own handler touches (``tests/aws/test_entry_imports.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rollout_sdk.aws.clients import AwsClients
from rollout_sdk.errors import ConfigurationError
from rollout_sdk.settings import get_settings, load_lambda_settings
from rollout_sdk.stack import LambdaFunction

if TYPE_CHECKING:
    from fastapi import FastAPI

    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.aws.metering import Costs
    from rollout_sdk.aws.telemetry import EmfTelemetry
    from rollout_sdk.cost.usage import CostEstimate
    from rollout_sdk.dispatch.base import Dispatcher, Job
    from rollout_sdk.engine.assembly import Engine
    from rollout_sdk.engine.osmosis03 import PollingLeases
    from rollout_sdk.engine.recovery import Recovery
    from rollout_sdk.engine.settlement import Settlement
    from rollout_sdk.engine.worker import RolloutWorker
    from rollout_sdk.engine.workflows import Workflows
    from rollout_sdk.http.auth import KeyProvider
    from rollout_sdk.settings import LambdaSettings, RolloutSettings
    from rollout_sdk.store.base import Store
    from rollout_sdk.store.record import RolloutRecord
    from rollout_sdk.traingate.client import TrainGateClient
    from rollout_sdk.vault import KeyVault

T = TypeVar("T")


class InvocationContext(Protocol):
    """What the handlers read of a Lambda context (Powertools' ``LambdaContext`` is one, and so
    is ``rollout-sdk invoke``'s)."""

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the invocation times out."""
        ...


#: The variables every function needs, with what ``template.yaml`` puts in each.
REQUIRED_VARIABLES = {
    "AGENT_LOOP": "the agent loop as module:attribute (the AgentLoop parameter)",
    "TABLE_NAME": "the rollout table's name (the RolloutTable resource)",
}


def required_variables(aws: LambdaSettings) -> tuple[str, str]:
    """``AGENT_LOOP`` and ``TABLE_NAME``; ConfigurationError naming each one missing."""
    values = {"AGENT_LOOP": aws.agent_loop, "TABLE_NAME": aws.table_name}
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise ConfigurationError(
            "invalid Lambda environment (set by template.yaml):\n  "
            + "\n  ".join(
                f"{name}: not set; it names {REQUIRED_VARIABLES[name]}" for name in missing
            )
            + "\nDeploy with template.yaml, or set the variables when invoking a function locally."
        )
    return str(aws.agent_loop), str(aws.table_name)


#: The longest rollout the durable worker runs (``RequestTimeoutSeconds`` with
#: ``DurableWorker=true``): a day. The record's lifetime, the idempotency slot's and the
#: execution's own timeout follow from it; a day of turns stays far inside an execution's
#: 25,000 operations (two a turn, and one per invocation) and its history's retention.
DURABLE_MAX_REQUEST_TIMEOUT_SECONDS = 86_400
#: The durable worker function's ``DurableConfig.ExecutionTimeout`` (template.yaml): the
#: longest rollout plus an hour for the replays, the suspensions between invocations and the
#: final report.
DURABLE_EXECUTION_TIMEOUT_SECONDS = DURABLE_MAX_REQUEST_TIMEOUT_SECONDS + 3_600
#: The durable worker function's ``DurableConfig.RetentionPeriodInDays`` (template.yaml): how
#: long Lambda keeps an ended execution's history, which its cost estimate prices.
DURABLE_RETENTION_DAYS = 1


#: The longest an osmosis-ai 0.3.8 result poll waits on Lambda (its ``result_wait_timeout_sec``).
#: API Gateway's HTTP API cuts every integration at 30 s, and the API function times out at
#: 29; the 9 s left cover what a poll does besides waiting (a read and a renewal before, a
#: read after, each well under a second even through boto3's retries) and a cold start
#: (about 1.5 s here, at most Lambda's 10 s init limit) with room to spare.
LAMBDA_RESULT_WAIT_SECONDS = 20.0
#: How often a waiting poll reads the record on Lambda, where nothing wakes it (the worker runs
#: in another function): a 20-second poll makes at most 12 store calls (a read, the renewal,
#: ten reads), and sees a change at most 2 s late.
LAMBDA_POLL_RECHECK_SECONDS = 2.0


def deployment_id(aws: LambdaSettings) -> str:
    """The deployment's identity, the same in every environment of one published version of
    the function (``/health``'s ``process_id``: osmosis-ai 0.3.8's ``wait_idle`` takes a change
    of it for a restart): a digest of the table's name and the version, naming neither."""
    seed = f"{aws.table_name}:{aws.function_name}:{aws.function_version}"
    return "lambda-" + hashlib.sha256(seed.encode()).hexdigest()[:20]


def check_osmosis03(settings: RolloutSettings) -> None:
    """Refuse a 0.3.8 workflow beside the durable worker, and a result wait longer than a
    poll has on Lambda."""
    aws = settings.aws
    if not aws.workflow:
        return
    if aws.durable_worker:
        raise ConfigurationError(
            "WORKFLOW is set but DURABLE_WORKER is true: osmosis-ai 0.3.8 workflows run on the "
            "worker function, one invocation each (a workflow has no turns to replay); set "
            "DurableWorker=false, or deploy the workflow in a stack of its own"
        )
    wait = settings.kit.osmosis03_result_wait_seconds
    if wait > LAMBDA_RESULT_WAIT_SECONDS:
        raise ConfigurationError(
            f"ROLLOUT_SDK_OSMOSIS03_RESULT_WAIT_SECONDS is {wait:g} s, but a result poll on "
            f"Lambda waits at most {LAMBDA_RESULT_WAIT_SECONDS:g} s (API Gateway cuts a "
            "request at 30 s): lower it (template.yaml sets 20)"
        )


def check_workflow_modules(aws: LambdaSettings) -> None:
    """Each of WORKFLOW, GRADER, WORKFLOW_CONFIG, GRADER_CONFIG names a module the build has,
    found without running it; ConfigurationError naming the variable and the module."""
    import importlib.util

    for variable, spec in (
        ("WORKFLOW", aws.workflow),
        ("GRADER", aws.grader),
        ("WORKFLOW_CONFIG", aws.workflow_config),
        ("GRADER_CONFIG", aws.grader_config),
    ):
        if not spec:
            continue
        module = spec.partition(":")[0]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that does not import
            found = False
        if not found:
            raise ConfigurationError(
                f"{variable} is {spec}, but the build has no module {module}: put its folder "
                "in AGENT_SOURCES (the template's parameter names it as module:attribute)"
            )


def check_deadlines(settings: RolloutSettings) -> None:
    """Refuse a rollout deadline the worker function cannot honour, and the durable worker
    beside the rollout queue."""
    aws = settings.aws
    requested = settings.server.request_timeout_seconds
    if aws.durable_worker:
        if aws.hand_off == "queue":
            raise ConfigurationError(
                "DURABLE_WORKER is true but HAND_OFF is queue: the durable worker runs one "
                "rollout per execution, started by an invoke; set HandOff=direct, or "
                "DurableWorker=false to keep the queue"
            )
        if requested > DURABLE_MAX_REQUEST_TIMEOUT_SECONDS:
            raise ConfigurationError(
                f"OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS is {requested:g} s, but the "
                f"durable worker runs a rollout for at most {DURABLE_MAX_REQUEST_TIMEOUT_SECONDS}"
                " s (a day): lower RequestTimeoutSeconds"
            )
        return
    budget = aws.worker_timeout_seconds - aws.deadline_margin_seconds
    if requested > budget:
        raise ConfigurationError(
            f"OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS is {requested:g} s, but the worker "
            f"function times out after {aws.worker_timeout_seconds:g} s "
            f"(WorkerTimeout) and keeps {aws.deadline_margin_seconds:g} s "
            f"(DEADLINE_MARGIN_SECONDS) to report: at most {budget:g} s fits. Lower the request "
            "timeout, or turn on the durable worker (DurableWorker=true) for rollouts longer "
            'than one invocation: docs/aws.md, "Rollouts longer than 15 minutes".'
        )


class LambdaRuntime:
    """The objects every function of one execution environment shares, each built once.

    Raises ConfigurationError when a variable ``template.yaml`` sets is missing, or when the
    request timeout does not fit in the worker function's.
    """

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        *,
        settings: RolloutSettings,
        clients: AwsClients,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _, self.table_name = required_variables(settings.aws)
        check_deadlines(settings)
        check_osmosis03(settings)
        self.agent_loop = agent_loop
        self.settings = settings
        self.aws = settings.aws
        self.clients = clients
        #: The engine's clock (the seam tests give simulated time through).
        self.clock = clock
        #: The cold start's init duration, charged to the environment's first invocation's
        #: rollouts (set by from_environment, which measures it).
        self.init_seconds = 0.0
        # One event loop for the environment's life: the shared TrainGate client's connections
        # belong to it, Mangum runs on the current loop, and every handler runs its work on it.
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)

    @classmethod
    def from_environment(cls, *, clients: AwsClients | None = None) -> LambdaRuntime:
        """Build from the environment ``template.yaml`` sets. Raises ConfigurationError."""
        from rollout_sdk.agent.validation import validate_agent_loop
        from rollout_sdk.aws.metering import init_duration
        from rollout_sdk.loader import load_agent_loop

        started = time.perf_counter()

        settings = get_settings().model_copy(update={"aws": load_lambda_settings()})
        spec, _ = required_variables(settings.aws)
        agent_loop = load_agent_loop(spec)
        validate_agent_loop(agent_loop).raise_if_invalid()
        clients = clients or AwsClients(
            endpoint_url=settings.aws.endpoint_url,
            max_pool_connections=max(10, settings.server.max_concurrent_rollouts),
            botocore_data=settings.aws.botocore_data,
        )
        runtime = cls(agent_loop, settings=settings, clients=clients)
        if settings.aws.workflow:
            # A workflow that fails to load fails the cold start of a function that runs it; an
            # HTTP function only finds its modules (it never runs them: their imports are the
            # worker's to pay), and the recovery functions neither (they settle a 0.3.8
            # rollout without it).
            if runtime.runs_workflows:
                _ = runtime.workflows
            elif runtime.answers_http:
                check_workflow_modules(settings.aws)
        runtime.init_seconds = init_duration(settings, measured=time.perf_counter() - started)
        return runtime

    @contextmanager
    def invocation(self, function: str) -> Iterator[None]:
        """One invocation of ``function`` (api, worker, queue_worker, failure, dead_letter,
        redrive): its metrics carry that function, and are written out when it ends, whatever
        way it ends (a failure to write them is logged once, never raised)."""
        telemetry = self.telemetry
        telemetry.begin(function)
        try:
            yield
        finally:
            telemetry.flush()

    def metered(
        self,
        function: LambdaFunction,
        context: Any = None,
        *,
        seats: int = 0,
        shares_request: bool = True,
    ) -> AbstractContextManager[Any]:
        """The cost meter's invocation of ``function`` (its cost label and hand-off) for the
        code run inside: ``seats`` rollouts from the start (a batch), sharing its request
        (``shares_request``) and the cold start's init."""
        return self.costs.invocation(
            function.names.cost_label,
            context,
            hand_off=function.hand_off_in(self.aws.hand_off),
            seats=seats,
            shares_request=shares_request,
        )

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` to completion on the environment's one loop."""
        return self.loop.run_until_complete(work)

    def deadline(self, context: InvocationContext | None) -> float | None:
        """Seconds a rollout may run in this invocation: the time left less the margin."""
        if context is None or not hasattr(context, "get_remaining_time_in_millis"):
            return None  # a direct call without a context, as tests and tools may make
        remaining = float(context.get_remaining_time_in_millis()) / 1000
        return max(0.0, remaining - self.aws.deadline_margin_seconds)

    def close(self) -> None:
        """Close the TrainGate client, the threads of the vault and the key provider, and the
        event loop (tests; Lambda just freezes)."""
        if "client" in self.__dict__:
            self.loop.run_until_complete(self.client.aclose())
        for name in ("vault", "server_keys"):
            close = getattr(self.__dict__.get(name), "close", None)
            if close is not None:
                close()
        self.loop.close()

    # ------------------------------------------------------------------ shared collaborators

    @cached_property
    def costs(self) -> Costs:
        """The environment's facts for the per-rollout cost estimate; the handlers open its
        invocations. A rollout's full figure, once it is final, goes to the metric RolloutCost."""
        from rollout_sdk.aws.metering import Costs
        from rollout_sdk.telemetry import Metric

        telemetry = self.telemetry

        def metric(record: RolloutRecord, estimate: CostEstimate) -> None:
            # The full figure, after delivery and re-drive: metric RolloutCost (US dollars).
            telemetry.observe(Metric.ROLLOUT_COST, estimate.usd)

        return Costs.for_lambda(self.settings, init_seconds=self.init_seconds, sink=metric)

    @cached_property
    def telemetry(self) -> EmfTelemetry:
        """Metrics in CloudWatch's embedded metric format; X-Ray subsegments too when the
        template's Tracing parameter turns them on (only then is the X-Ray SDK imported)."""
        from rollout_sdk.aws.telemetry import EmfTelemetry, XRaySpans

        spans = None if self.aws.trace_disabled else XRaySpans()
        return EmfTelemetry(
            namespace=self.aws.metrics_namespace, hand_off=self.aws.hand_off, spans=spans
        )

    @cached_property
    def store(self) -> Store:
        """The DynamoDB store (large values in the payload bucket)."""
        from rollout_sdk.store.dynamodb import DynamoDBStore

        bucket = self.aws.payload_bucket
        return DynamoDBStore(
            self.table_name,
            client=self.clients.dynamodb,
            s3=(lambda: self.clients.s3) if bucket else None,
            bucket=bucket,
        )

    @cached_property
    def client(self) -> TrainGateClient:
        """The process's one TrainGate client."""
        from rollout_sdk.traingate.client import TrainGateClient
        from rollout_sdk.traingate.outbound import OutboundPolicy, Reach

        # On Lambda the kit calls public addresses only, and hosts the operator names
        # (AllowedServerHosts): it may run inside the user's VPC (docs/security.md).
        policy = OutboundPolicy.from_settings(self.settings.kit, where=Reach.PUBLIC)
        return TrainGateClient(self.settings.client, policy=policy, telemetry=self.telemetry)

    @cached_property
    def vault(self) -> KeyVault | None:
        """KMS (CALLBACK_KEY_KMS_KEY_ID), for callback keys of responses parked for re-drive and
        of the rollout queue's messages."""
        from rollout_sdk.vault import KmsVault

        key_id = self.aws.callback_key_kms_key_id
        return KmsVault(key_id, client=lambda: self.clients.kms) if key_id else None

    @property
    def entry(self) -> str:
        """The handler.py entry point this environment runs (``_HANDLER``'s last part; empty
        where no function's is set: ``rollout-sdk invoke``, tests)."""
        return (self.aws.handler or "").rpartition(".")[2]

    @property
    def answers_http(self) -> bool:
        """This environment runs the API or the poll function, which take the 0.3.8 routes and
        hand each rollout to the worker: they never load the workflow."""
        return self.entry in {LambdaFunction.API.names.entry, LambdaFunction.POLL.names.entry}

    @property
    def runs_workflows(self) -> bool:
        """This environment runs rollouts (the worker or the queue worker), or is no one
        function's: it loads the workflow."""
        workers = {LambdaFunction.WORKER.names.entry, LambdaFunction.QUEUE_WORKER.names.entry}
        return not self.entry or self.entry in workers

    @property
    def workflow_names(self) -> tuple[str, str | None] | None:
        """The workflow and grader the template names (``/health`` says them), or None."""
        aws = self.aws
        return (aws.workflow, aws.grader or None) if aws.workflow else None

    @cached_property
    def workflows(self) -> Workflows | None:
        """The osmosis-ai 0.3.8 workflow (and grader) WORKFLOW names, or None (v1 only)."""
        aws = self.aws
        if not aws.workflow:
            return None
        from rollout_sdk.loader import load_workflows

        workflows: Workflows = load_workflows(
            aws.workflow,
            aws.grader or None,
            aws.workflow_config or None,
            aws.grader_config or None,
        )
        return workflows

    @cached_property
    def leases(self) -> PollingLeases | None:
        """The 0.3.8 polling leases the re-drive checks, where a workflow is served."""
        if not self.aws.workflow:
            return None
        from rollout_sdk.engine.osmosis03 import PollingLeases

        return PollingLeases(self.engine, clock=self.clock)

    @cached_property
    def engine(self) -> Engine:
        """The environment's one engine (worker, delivery, settlement, recovery), on the same
        store, client and vault; the API function's app shares it. Its recovery hands off
        again through the template's hand-off (:meth:`_hand_off`)."""
        from rollout_sdk.aws.ledger import MeteredLedger
        from rollout_sdk.engine.assembly import Engine

        return Engine.build(
            store=self.store,
            client=self.client,
            settings=self.settings,
            vault=self.vault,
            agent_loop=self.agent_loop,
            telemetry=self.telemetry,
            costs=MeteredLedger(),
            hand_off=self._hand_off,
            clock=self.clock,
            # The workers run the workflow; the other functions never load it.
            workflows=self.workflows if self.runs_workflows else None,
            process_id=deployment_id(self.aws),
        )

    async def _hand_off(self, job: Job) -> None:
        """The re-drive's hand-off of a rollout a duplicate init's failed hand-off left
        waiting: through the template's dispatcher, built when first needed (a worker
        function's cold start never builds it)."""
        await self.dispatcher.dispatch(job)

    @cached_property
    def worker(self) -> RolloutWorker:
        """The engine's worker (the worker and queue functions run it)."""
        return self.engine.require_worker()

    @cached_property
    def settlement(self) -> Settlement:
        """The engine's settlement (the failure destination and the dead-letter queue)."""
        return self.engine.settlement

    @cached_property
    def recovery(self) -> Recovery:
        """The engine's recovery (the scheduled re-drive). Its hand-off's dispatcher is built
        now, so that a hand-off the environment misconfigures fails the re-drive's cold start,
        not its first re-hand-off."""
        _ = self.dispatcher
        return self.engine.recovery

    # ------------------------------------------------------------------ API function

    @cached_property
    def server_keys(self) -> KeyProvider:
        """The app's key provider: the keys in SERVER_KEY_SECRET_ARN, or none without one."""
        from rollout_sdk.aws.secrets import SecretServerKeys

        name = self.aws.server_key_secret
        if not name:
            return _no_keys
        return SecretServerKeys(
            name,
            max_age_seconds=self.aws.secret_max_age_seconds,
            client=lambda: self.clients.secretsmanager,
        )

    @cached_property
    def dispatcher(self) -> Dispatcher:
        """The hand-off the template chose: an asynchronous invoke (of the durable worker, as
        an execution named after the rollout, with DurableWorker), or the rollout queue, each
        carrying the API function's part of the rollout's cost in the job."""
        from rollout_sdk.cost.meter import carried

        if self.aws.hand_off == "queue":
            from rollout_sdk.dispatch.sqs import SqsDispatcher

            if not self.aws.queue_url:
                raise ConfigurationError("HAND_OFF is queue but QUEUE_URL is not set")
            if self.vault is None:
                # The message would otherwise carry the callback key in clear to every reader of
                # the queue and its dead-letter queue.
                raise ConfigurationError(
                    "HAND_OFF is queue but CALLBACK_KEY_KMS_KEY_ID is not set: the queue's "
                    "messages carry the callback key sealed with that KMS key"
                )
            return SqsDispatcher(
                self.aws.queue_url, client=self.clients.sqs, vault=self.vault, cost_share=carried
            )
        from rollout_sdk.dispatch.aws_lambda import DurableLambdaDispatcher, LambdaDispatcher

        function = self.aws.worker_function_name
        if not function:
            raise ConfigurationError("WORKER_FUNCTION_NAME is not set (template.yaml sets it)")
        if self.aws.durable_worker:
            if self.vault is None:
                # The execution's input stays in its history, readable for the retention period.
                raise ConfigurationError(
                    "DURABLE_WORKER is true but CALLBACK_KEY_KMS_KEY_ID is not set: the durable "
                    "execution's input carries the callback key sealed with that KMS key"
                )
            from rollout_sdk.aws.durable_sdk import require_durable_invoke

            require_durable_invoke(self.clients.lambda_)
            return DurableLambdaDispatcher(
                function, client=self.clients.lambda_, vault=self.vault, cost_share=carried
            )
        return LambdaDispatcher(function, client=self.clients.lambda_, cost_share=carried)

    @cached_property
    def app(self) -> FastAPI:
        """The Lambda API function's composition of the app the local server runs, on
        DynamoDB and the template's hand-off."""
        from rollout_sdk.http.app import lambda_api_app

        return lambda_api_app(
            self.agent_loop,
            self.engine,
            self.dispatcher,
            key_provider=self.server_keys,
            docs=self.aws.enable_docs,
            workflow_names=self.workflow_names,
            recheck_seconds=LAMBDA_POLL_RECHECK_SECONDS,
        )


async def _no_keys() -> list[str]:
    return []
