"""Settings, read from the environment under the v1 SDK's variable names (protocol.md section 7).

Read once, through :func:`get_settings`, by the wiring (the CLI, ``create_app``, the Lambda
composition root, which also checks the Lambda functions' own variables with
:func:`load_lambda_settings`); no other module reads a setting from ``os.environ``. (The embedded
emulator copies the environment for its child process, and ``rollout-sdk invoke`` writes a
function's environment, as its job.) Out-of-range values raise
:class:`~rollout_sdk.errors.ConfigurationError` naming the variable.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.hosts import parse_allowed_hosts
from rollout_sdk.prices import price_overrides
from rollout_sdk.protocol import DEFAULT_MAX_METADATA_SIZE_BYTES

CLIENT_PREFIX = "OSMOSIS_ROLLOUT_CLIENT_"
SERVER_PREFIX = "OSMOSIS_ROLLOUT_SERVER_"
TOP_PREFIX = "OSMOSIS_ROLLOUT_"
KIT_PREFIX = "ROLLOUT_SDK_"
#: How every variable of the tree begins, but the Lambda functions' own (``AGENT_LOOP``, ...,
#: which template.yaml sets): what a clean environment for a test or a child process drops.
VARIABLE_PREFIXES = (TOP_PREFIX, KIT_PREFIX, "OSMOSIS_PLATFORM_", "OSMOSIS_WORKSPACE_")
DEFAULT_PLATFORM_URL = "https://platform.osmosis.ai"


class RolloutClientSettings(BaseSettings):
    """How the server talks to TrainGate (``OSMOSIS_ROLLOUT_CLIENT_*``)."""

    model_config = SettingsConfigDict(env_prefix=CLIENT_PREFIX, extra="ignore")

    timeout_seconds: float = Field(300.0, gt=0, le=3600)
    max_retries: int = Field(3, ge=0, le=20)
    complete_rollout_retries: int = Field(2, ge=0, le=20)
    retry_base_delay: float = Field(1.0, ge=0, le=600)
    retry_max_delay: float = Field(30.0, ge=0, le=3600)
    max_connections: int = Field(100, ge=1, le=100_000)
    # Accepted and checked, as in v1, but the kit's aiohttp pool has no cap of its own on idle
    # connections: they are bounded by max_connections and dropped after 4 s idle
    # (rollout_sdk/traingate/transport.py). httpx's own pool, given as the client's transport,
    # honours it.
    max_keepalive_connections: int = Field(20, ge=0, le=100_000)

    @model_validator(mode="after")
    def _consistent(self) -> RolloutClientSettings:
        if self.retry_max_delay < self.retry_base_delay:
            raise ValueError(
                f"{CLIENT_PREFIX}RETRY_MAX_DELAY ({self.retry_max_delay}) must be at least "
                f"{CLIENT_PREFIX}RETRY_BASE_DELAY ({self.retry_base_delay})"
            )
        if self.max_keepalive_connections > self.max_connections:
            raise ValueError(
                f"{CLIENT_PREFIX}MAX_KEEPALIVE_CONNECTIONS ({self.max_keepalive_connections}) "
                f"must not exceed {CLIENT_PREFIX}MAX_CONNECTIONS ({self.max_connections})"
            )
        return self


class RolloutServerSettings(BaseSettings):
    """How the rollout server runs rollouts (``OSMOSIS_ROLLOUT_SERVER_*``)."""

    model_config = SettingsConfigDict(env_prefix=SERVER_PREFIX, extra="ignore")

    max_concurrent_rollouts: int = Field(100, ge=1, le=100_000)
    record_ttl_seconds: int = Field(3600, ge=60, le=30 * 24 * 3600)
    request_timeout_seconds: float = Field(600.0, gt=0, le=7 * 24 * 3600)


class KitSettings(BaseSettings):
    """The kit's own settings, beyond the v1 names (``ROLLOUT_SDK_*``)."""

    model_config = SettingsConfigDict(env_prefix=KIT_PREFIX, extra="ignore")

    #: Largest init body accepted; over it, 413 before the body is parsed (Lambda's synchronous
    #: payload limit is 6 MB, so more could never arrive there).
    max_body_bytes: int = Field(6 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024)
    #: What an init body may hold, counted before it is parsed (rollout_sdk.http.body_limits):
    #: over any of them, 413. Within them, the worst body the body limit lets through costs
    #: the API function well under 1 s of CPU and 200 MiB (``python -m bench.parse_cost``).
    #: v1 set none; each is far above a real init, which carries a few to a few hundred
    #: messages and metadata of at most OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES (1 MiB).
    #: JSON values (containers, scalars, and object keys, one each): 1 MiB of metadata holds
    #: at most 524,288 (``0,`` is the shortest), and 500 real messages a few thousand more.
    max_json_values: int = Field(1_000_000, ge=10_000, le=100_000_000)
    #: Levels arrays and objects nest, the body's own object being the first: a conversation
    #: with content parts and tool calls nests 6. Twice the 64 levels a field may hold (deeper
    #: is a 422 naming the field), and within what the json module's parser can read.
    max_json_depth: int = Field(128, ge=8, le=512)
    #: Entries of ``messages``: a real init sends a few to a few hundred (the prompt of one
    #: rollout, not its turns).
    max_messages: int = Field(10_000, ge=100, le=10_000_000)
    #: Entries of ``completion_params.tools``, when it is a list (it goes into every chat
    #: call's body): chat APIs take far fewer (OpenAI's at most 128).
    max_tools: int = Field(1_000, ge=10, le=1_000_000)
    #: Hosts ``server_url`` may name, comma-separated, each ``host`` or ``host:port``; empty
    #: allows any host the outbound policy allows. A host named here is called at any address
    #: but a link-local one (a private TrainGate inside the VPC): rollout_sdk/traingate/outbound.py.
    allowed_server_hosts: str = ""
    #: Accept ``server_url`` hosts in 169.254.0.0/16 and fe80::/10 (cloud metadata lives there).
    allow_link_local: bool = False
    #: Which addresses the kit's callers connect to: ``public`` only, or ``private`` (loopback,
    #: RFC 1918, shared and unique-local too). Unset: where the kit runs decides (Lambda and
    #: ``rollout-sdk invoke``: public; ``serve``, ``demo``, ``test``: private).
    outbound_addresses: Literal["public", "private"] | None = None
    #: The largest answer body (after decoding) read from TrainGate or an endpoint; past it the
    #: call fails. 32 MiB: a real chat answer is about 1 MB at most (traingate/outbound.py).
    max_answer_bytes: int = Field(32 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    #: Rollouts one local process holds beyond those running; past it, init answers 429.
    #: 0 refuses at the concurrency limit.
    max_queued_rollouts: int = Field(1000, ge=0, le=1_000_000)
    #: Seconds a 429 tells TrainGate to wait (Retry-After).
    retry_after_seconds: int = Field(2, ge=1, le=3600)
    #: osmosis-ai 0.3.8's wire: how long a result poll waits for a change, and how long a
    #: polling lease lasts unrenewed (each poll renews it; one not renewed ends the rollout
    #: ``lease_expired``). 0.3.8's defaults; the lease must outlast the wait.
    osmosis03_result_wait_seconds: float = Field(30.0, gt=0, le=3600)
    osmosis03_polling_lease_seconds: float = Field(120.0, gt=0, le=86400)
    #: The most 0.3.8 rollouts in flight a submit may find (the live index's count); at it,
    #: submit answers 429 with Retry-After. 0: no limit (the local server's own capacity, its
    #: queue, answers 429 first). On Lambda each one holds a worker and a waiting poll.
    osmosis03_max_live_rollouts: int = Field(0, ge=0, le=1_000_000)
    #: A running rollout's lease: renewed every ``heartbeat_seconds``; a lease not renewed for
    #: this long belongs to a worker that died.
    lease_seconds: float = Field(60.0, ge=5, le=3600)
    heartbeat_seconds: float = Field(15.0, ge=1, le=1800)
    #: How often the re-drive sends undelivered final responses again, and for how long.
    redrive_interval_seconds: float = Field(30.0, ge=1, le=3600)
    redrive_max_age_seconds: int = Field(86400, ge=60, le=30 * 24 * 3600)
    #: One re-drive pass starts no new work after this long (the scheduled function runs every
    #: minute; a pass holds the pass lease until it ends), and sends this many at once.
    redrive_pass_seconds: float = Field(40.0, ge=1, le=3600)
    redrive_concurrency: int = Field(16, ge=1, le=1000)
    #: Overrides of the per-rollout cost estimate's prices (``rollout_sdk.prices``): a JSON
    #: object of US dollars by price name; an unknown name or a negative price is refused.
    prices: str = ""

    @field_validator("prices")
    @classmethod
    def _known_prices(cls, value: str) -> str:
        price_overrides(value)  # ValueError naming each bad key
        return value

    def price_overrides(self) -> dict[str, float]:
        """``ROLLOUT_SDK_PRICES``, parsed: the prices it overrides, by name."""
        return price_overrides(self.prices)

    @model_validator(mode="after")
    def _consistent(self) -> KitSettings:
        if self.heartbeat_seconds * 2 > self.lease_seconds:
            raise ValueError(
                f"{KIT_PREFIX}HEARTBEAT_SECONDS ({self.heartbeat_seconds:g}) must be at most half "
                f"of {KIT_PREFIX}LEASE_SECONDS ({self.lease_seconds:g})"
            )
        if self.osmosis03_polling_lease_seconds <= self.osmosis03_result_wait_seconds:
            raise ValueError(
                f"{KIT_PREFIX}OSMOSIS03_POLLING_LEASE_SECONDS "
                f"({self.osmosis03_polling_lease_seconds:g}) must exceed "
                f"{KIT_PREFIX}OSMOSIS03_RESULT_WAIT_SECONDS "
                f"({self.osmosis03_result_wait_seconds:g}): each poll renews the lease, and a "
                "poll waits that long"
            )
        return self

    @field_validator("allowed_server_hosts")
    @classmethod
    def _parsable_hosts(cls, value: str) -> str:
        parse_allowed_hosts(value)  # ValueError naming the bad entry
        return value


class CliSettings(BaseSettings):
    """What the ``rollout-sdk`` command reads beyond the server's settings; its options win.

    Each field reads the variable its alias names. The keys are ``SecretStr``: never printed.
    """

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    #: The key TrainGate sends (``serve`` requires it; ``register`` sends it to the platform).
    server_key: SecretStr | None = Field(None, validation_alias="ROLLOUT_SDK_SERVER_KEY")
    #: ``register``: the platform access token, the workspace and the platform's base URL.
    platform_token: SecretStr | None = Field(None, validation_alias="OSMOSIS_PLATFORM_TOKEN")
    workspace_id: str | None = Field(None, validation_alias="OSMOSIS_WORKSPACE_ID")
    platform_url: str = Field(DEFAULT_PLATFORM_URL, validation_alias="OSMOSIS_PLATFORM_URL")


#: Lambda's hard ceiling on one invocation.
LAMBDA_MAX_TIMEOUT_SECONDS = 900


class LambdaSettings(BaseSettings):
    """What ``template.yaml`` passes to the Lambda functions (its own, unprefixed names).

    Every field is optional, so the local tools never need one; the Lambda composition root
    (``rollout_sdk.aws.runtime``) names each variable it requires and finds missing.
    """

    # populate_by_name: a dump of the tree (field names) validates back, as the v1 setters do.
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    agent_loop: str | None = Field(None, validation_alias="AGENT_LOOP")
    #: The osmosis-ai 0.3.8 workflow (and grader, and each one's config instance) to serve
    #: beside the agent loop, each ``module:attribute`` (the template's Workflow and Grader
    #: parameters; the configs have none, and are read when set by hand); unset or empty: v1
    #: only.
    workflow: str | None = Field(None, validation_alias="WORKFLOW")
    grader: str | None = Field(None, validation_alias="GRADER")
    workflow_config: str | None = Field(None, validation_alias="WORKFLOW_CONFIG")
    grader_config: str | None = Field(None, validation_alias="GRADER_CONFIG")
    table_name: str | None = Field(None, validation_alias="TABLE_NAME")
    worker_function_name: str | None = Field(None, validation_alias="WORKER_FUNCTION_NAME")
    server_key_secret: str | None = Field(None, validation_alias="SERVER_KEY_SECRET_ARN")
    payload_bucket: str | None = Field(None, validation_alias="PAYLOAD_BUCKET")
    #: "direct": one asynchronous worker invocation per rollout; "queue": an SQS queue whose
    #: batches one worker invocation runs together.
    hand_off: Literal["direct", "queue"] = Field("direct", validation_alias="HAND_OFF")
    #: The template's DurableWorker: rollouts run on the durable worker function, one durable
    #: execution each, across as many invocations as they need (rollout_sdk/aws/durable.py).
    durable_worker: bool = Field(False, validation_alias="DURABLE_WORKER")
    #: The operations a durable execution's history may hold (Lambda's limit, 25,000): the
    #: durable worker ends a rollout ``history_full`` before its next step would leave no room
    #: for a suspension. Lower it to test that path, or to bound a rollout's turns.
    durable_max_operations: int = Field(
        25_000, ge=10, le=25_000, validation_alias="DURABLE_MAX_OPERATIONS"
    )
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
    #: botocore's endpoint data cut to the kit's services (the dependency layer's
    #: /opt/botocore-data): the kit's own clients read it (rollout_sdk/aws/clients.py).
    botocore_data: str | None = Field(None, validation_alias="ROLLOUT_SDK_BOTOCORE_DATA")
    #: Lambda's own variables (the cost estimate's facts): the function's name and memory, and
    #: how its environment was initialised (on-demand, provisioned-concurrency, snap-start).
    function_name: str | None = Field(None, validation_alias="AWS_LAMBDA_FUNCTION_NAME")
    #: The function's handler as Lambda names it (``handler.api``): which entry point this
    #: environment runs.
    handler: str | None = Field(None, validation_alias="_HANDLER")
    #: The function's published version (``$LATEST`` unpublished): with the table's name, the
    #: deployment's identity (``/health``'s ``process_id``).
    function_version: str = Field("$LATEST", validation_alias="AWS_LAMBDA_FUNCTION_VERSION")
    function_memory_mb: int | None = Field(
        None, ge=1, validation_alias="AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
    )
    initialization_type: str | None = Field(None, validation_alias="AWS_LAMBDA_INITIALIZATION_TYPE")
    enable_docs: bool = Field(False, validation_alias="ROLLOUT_SDK_ENABLE_DOCS")
    #: The CloudWatch namespace of the kit's metrics (template.yaml sets it).
    metrics_namespace: str = Field(
        "RolloutSDK", min_length=1, max_length=255, validation_alias="POWERTOOLS_METRICS_NAMESPACE"
    )
    #: The kit's X-Ray subsegments (Powertools Tracer, the X-Ray SDK) are off unless this says
    #: false: the template's Tracing parameter sets it. Unlike Powertools' own default, unset
    #: means off, so that nothing imports the X-Ray SDK unless asked to.
    trace_disabled: bool = Field(True, validation_alias="POWERTOOLS_TRACE_DISABLED")


class RolloutSettings(BaseSettings):
    """All settings; ``client``, ``server`` and ``kit`` read their own prefixes, ``cli`` the
    command's own variables, ``aws`` the variables ``template.yaml`` sets."""

    model_config = SettingsConfigDict(env_prefix=TOP_PREFIX, extra="ignore")

    client: RolloutClientSettings = Field(default_factory=RolloutClientSettings)
    server: RolloutServerSettings = Field(default_factory=RolloutServerSettings)
    kit: KitSettings = Field(default_factory=KitSettings)
    cli: CliSettings = Field(default_factory=CliSettings)
    aws: LambdaSettings = Field(default_factory=LambdaSettings)
    max_metadata_size_bytes: int = Field(
        DEFAULT_MAX_METADATA_SIZE_BYTES, ge=1024, le=100 * 1024 * 1024
    )


_PREFIX_BY_LOCATION = {"client": CLIENT_PREFIX, "server": SERVER_PREFIX, "kit": KIT_PREFIX}


def _variable_name(loc: tuple[Any, ...]) -> str:
    if len(loc) >= 2 and loc[0] in _PREFIX_BY_LOCATION:
        return _PREFIX_BY_LOCATION[loc[0]] + str(loc[1]).upper()
    if len(loc) >= 1 and loc[0] not in _PREFIX_BY_LOCATION:
        return TOP_PREFIX + str(loc[0]).upper()
    return TOP_PREFIX + "_".join(str(part).upper() for part in loc)


def _describe(exc: ValidationError, prefix: str | None = None) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        name = (prefix + str(loc[0]).upper()) if prefix is not None and loc else _variable_name(loc)
        given = err.get("input")
        shown = f" (got {given!r})" if not isinstance(given, dict) and given is not None else ""
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        lines.append(f"{name}: {message}{shown}" if loc else message)
    return "invalid settings:\n  " + "\n  ".join(lines)


def load_settings(**overrides: Any) -> RolloutSettings:
    """Read the settings from the environment; ConfigurationError naming every bad variable."""
    problems: list[str] = []
    client: RolloutClientSettings | None = None
    server: RolloutServerSettings | None = None
    try:
        client = RolloutClientSettings(**overrides.pop("client", {}))
    except ValidationError as exc:
        problems.append(_describe(exc, CLIENT_PREFIX))
    try:
        server = RolloutServerSettings(**overrides.pop("server", {}))
    except ValidationError as exc:
        problems.append(_describe(exc, SERVER_PREFIX))
    kit: KitSettings | None = None
    try:
        kit = KitSettings(**overrides.pop("kit", {}))
    except ValidationError as exc:
        problems.append(_describe(exc, KIT_PREFIX))
    # Strings and secrets only: nothing in it can be out of range.
    cli = CliSettings(**overrides.pop("cli", {}))
    # Read by the Lambda functions only, which check them (load_lambda_settings): their names are
    # generic (WORKER_TIMEOUT_SECONDS, HAND_OFF), so the local tools must not fail on them.
    try:
        aws = LambdaSettings(**overrides.pop("aws", {}))
    except ValidationError:
        aws = LambdaSettings.model_construct()
    try:
        top = RolloutSettings(
            client=client or RolloutClientSettings.model_construct(),
            server=server or RolloutServerSettings.model_construct(),
            kit=kit or KitSettings.model_construct(),
            cli=cli,
            aws=aws,
            **overrides,
        )
    except ValidationError as exc:
        problems.append(_describe(exc))
    if problems:
        lines = [line for p in problems for line in p.splitlines()[1:]]
        raise ConfigurationError("invalid settings:\n" + "\n".join(lines))
    return top


def load_lambda_settings() -> LambdaSettings:
    """The Lambda functions' variables, checked: ConfigurationError naming every bad one (the
    Lambda composition root calls it; the rest of the tree comes from :func:`get_settings`)."""
    try:
        return LambdaSettings()
    except ValidationError as exc:
        lines = _describe(exc, "").splitlines()[1:]  # its errors carry the variable's name
        raise ConfigurationError("invalid settings:\n" + "\n".join(lines)) from exc


_configured: RolloutSettings | None = None


@lru_cache(maxsize=1)
def _from_environment() -> RolloutSettings:
    return load_settings()


def get_settings() -> RolloutSettings:
    """The process's settings: those given to :func:`configure`, else the environment, read once."""
    return _configured if _configured is not None else _from_environment()


def configure(settings: RolloutSettings) -> None:
    """Use ``settings`` for apps created from now on (v1 API)."""
    global _configured  # noqa: PLW0603 - the v1 API is a process-wide configure()
    _configured = settings


def reset_settings() -> None:
    """Forget :func:`configure` and re-read the environment next time (v1 API; tests)."""
    global _configured  # noqa: PLW0603 - see configure()
    _configured = None
    _from_environment.cache_clear()


def get_max_metadata_size_bytes() -> int:
    """The metadata limit in force (v1 API)."""
    return get_settings().max_metadata_size_bytes


def set_max_metadata_size_bytes(size_bytes: int) -> None:
    """Change the metadata limit for apps created from now on (v1 API)."""
    try:
        updated = RolloutSettings.model_validate(
            {**get_settings().model_dump(), "max_metadata_size_bytes": size_bytes}
        )
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from exc
    configure(updated)
