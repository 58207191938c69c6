"""A local TrainGate that forwards each chat call to an OpenAI-compatible endpoint.

``rollout-sdk test`` (and ``rollout-sdk demo --base-url``) run the agent through the kit's real
server and worker; this app stands where TrainGate would. Its ``/v1/chat/completions`` turns the
kit's chat body into an OpenAI one and sends it to ``{base_url}/chat/completions``:

- ``model`` is the one the command was given (the agent's ``model``, "default" unless it passes
  one, means nothing to TrainGate either);
- the tools the rollout's init answered with are sent as OpenAI ``tools`` (unless the agent
  passes ``tools`` itself);
- ``rollout_id`` (TrainGate's routing key) and ``logprobs``/``top_logprobs`` (TrainGate records
  logprobs for training; reasoning models refuse the field) are dropped;
- ``temperature``, ``top_p`` and ``max_tokens`` at the values the kit fills in when an agent
  passes none (1.0, 1.0, 512) are dropped unless the rollout's completion params set them, so
  the model's own defaults apply, as in v1's test mode, which sent only what the agent passed;
- ``max_tokens`` is sent as ``max_completion_tokens`` to api.openai.com (its newer models refuse
  ``max_tokens``) and as is elsewhere; a 400 that names the field sent is answered by sending
  the other name once, and that name is used from then on.

The answer goes back to the kit as the endpoint gave it (tool calls included). The key is sent
in the ``Authorization`` header only, and removed from any text of the endpoint's that is kept
or shown. User info in ``--base-url`` (``user:password@``) is taken out of the URL and sent as
HTTP Basic credentials instead of a key; the URL is shown with it, and with its query values
(but ``api-version``), as ``***`` (:func:`rollout_sdk.hosts.redact_url`). Failures are named with their fix (:class:`EndpointFailure`); one that every row would
hit (a refused key, an unknown model, an unreachable endpoint, no quota) trips the forwarder:
later chat calls fail at once with the same failure, and the runner starts no more rows.

``/v1/rollout/completed`` records each rollout's final response for the runner.

FastAPI and the HTTP stack are imported where the forwarder is built, so reading a key file or
parsing options loads neither.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.hosts import (
    REDACTED,
    redact_text,
    redact_url,
    split_credentials,
    url_secrets,
    user_info_secrets,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-5-mini"
DEFAULT_TIMEOUT_SECONDS = 300.0
#: The values the kit's chat body carries when the agent passes none (RolloutLLMClient).
KIT_FILLERS: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 512}
#: Fields of the kit's chat body that are TrainGate's, not the model's.
DROPPED = frozenset({"rollout_id", "logprobs", "top_logprobs", "model"})
#: How long a chat call waits for its rollout's init answer (the tools) to be recorded.
TOOLS_WAIT_SECONDS = 30.0
#: The status the kit's client sees for a failure no retry can mend (final, not 408 or 429).
FINAL_STATUS = 424
#: The longest first line ``--api-key-file`` reads (a key file holds one short line).
MAX_KEY_LINE = 16 * 1024

T = TypeVar("T")


class Slot(Generic[T]):
    """A value set once from any thread and awaited from any event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[T]]] = []

    def set(self, value: T) -> None:
        """Set the value (a second call is ignored) and wake every waiter."""
        with self._lock:
            if self._done:
                return
            self._done, self._value = True, value
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # A loop that has closed has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future, value)

    @property
    def done(self) -> bool:
        return self._done

    async def wait(self) -> T:
        """The value, once set (bound the wait with ``asyncio.timeout``)."""
        with self._lock:
            if self._done:
                return self._value  # type: ignore[return-value]
            future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            self._waiters.append((asyncio.get_running_loop(), future))
        return await future


def _resolve(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


# ---------------------------------------------------------------------------- the endpoint


@dataclass(frozen=True, repr=False)
class Endpoint:
    """Where chat calls go: ``base_url`` (no trailing ``/``, no user info; a query is kept), the
    model name as sent, the key, the per-call timeout, and the user info ``--base-url`` had
    (``user:password`` as written), sent as HTTP Basic credentials when there is no key.

    None of the credentials is ever shown: the repr and :meth:`shown` give the URL as
    :func:`~rollout_sdk.hosts.redact_url` shows it, and :meth:`redact` cuts them from text.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    user_info: str | None = None

    def __repr__(self) -> str:
        return f"Endpoint(base_url={self.shown()!r}, model={self.model!r}, timeout={self.timeout})"

    def at(self, path: str) -> str:
        """The URL of ``path`` under the base (before its query)."""
        parts = urlsplit(self.base_url)
        return urlunsplit(parts._replace(path=parts.path + path))

    @property
    def chat_url(self) -> str:
        return self.at("/chat/completions")

    def shown(self, path: str = "") -> str:
        """The base URL (or that of ``path`` under it) as shown: user info as ``***@``, query
        values as ``***``."""
        url = redact_url(self.at(path))
        if self.user_info is not None:
            scheme, sep, rest = url.partition("://")
            url = f"{scheme}{sep}{REDACTED}@{rest}"
        return url

    @property
    def is_openai(self) -> bool:
        return urlsplit(self.base_url).hostname == "api.openai.com"

    @property
    def _basic(self) -> str | None:
        """The user info as HTTP Basic credentials (percent-decoded, UTF-8), None without it."""
        if self.user_info is None:
            return None
        user, _, password = self.user_info.partition(":")
        return base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()

    @property
    def authorization(self) -> bytes | None:
        """The ``Authorization`` header: the key as a Bearer token, else the URL's user info as
        HTTP Basic credentials, else None."""
        if self.api_key:
            return b"Bearer " + self.api_key.encode()
        return None if self._basic is None else f"Basic {self._basic}".encode()

    @cached_property
    def _secrets(self) -> list[str]:
        found = [self.api_key or "", self._basic or "", *url_secrets(self.base_url)]
        return found + ([] if self.user_info is None else user_info_secrets(self.user_info))

    def redact(self, text: str) -> str:
        """``text`` without the key, the user info or the URL's query values (an endpoint may
        echo the key in an error, an HTTP stack's message may hold the URL)."""
        return redact_text(text, self._secrets)


def resolve_model(model: str, *, base_url: str | None) -> str:
    """The model name to send, from a v1-style name.

    ``openai/NAME`` is sent as ``NAME``. Any other ``provider/NAME`` (LiteLLM's form) is sent
    as given to a ``--base-url`` endpoint (a LiteLLM proxy routes such names; vLLM serves models
    named ``org/model``); without one it is a ConfigurationError: OpenAI serves no such name,
    and the kit calls OpenAI-compatible endpoints only.
    """
    name = model.strip()
    if not name:
        raise ConfigurationError("--model is empty; pass a model name, e.g. --model gpt-5-mini")
    name = name.removeprefix("openai/")
    if "/" in name and base_url is None:
        provider = name.split("/", 1)[0]
        raise ConfigurationError(
            f"model {model!r} names the provider {provider!r}, which is not OpenAI: the kit "
            "calls OpenAI-compatible endpoints only. Run one for it (a LiteLLM proxy, or the "
            "provider's own OpenAI-compatible URL) and pass --base-url URL with the model name "
            "that endpoint expects"
        )
    return name


def resolve_endpoint(
    *,
    model: str,
    base_url: str | None,
    api_key: str | None,
    environ: dict[str, str],
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Endpoint:
    """The endpoint of a run: ``base_url`` or OpenAI's, the key from ``api_key`` or
    ``OPENAI_API_KEY``. Raises ConfigurationError (a bad URL, no key for OpenAI itself)."""
    name = resolve_model(model, base_url=base_url)
    given = (base_url or OPENAI_BASE_URL).strip()
    url, user_info = split_credentials(given)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"--base-url {redact_url(given)!r} is not an http(s) URL; give the API's base, e.g. "
            "http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama)"
        )
    url = urlunsplit(parts._replace(path=parts.path.rstrip("/"), fragment=""))
    if user_info is not None and api_key:
        raise ConfigurationError(
            "--base-url holds credentials (the user info before '@', sent as HTTP Basic auth) "
            "and an API key is given too (--api-key or --api-key-file, sent as a Bearer token): "
            "a request has one Authorization header. Pass one of them"
        )
    # Credentials in the URL are the ones meant for it: OPENAI_API_KEY is not sent along.
    key = api_key or (None if user_info is not None else environ.get("OPENAI_API_KEY")) or None
    if key is None and base_url is None:
        raise ConfigurationError(
            "no API key for OpenAI: set OPENAI_API_KEY or pass --api-key-file or --api-key (an "
            "endpoint of your own that needs none: pass --base-url)"
        )
    if not timeout > 0:
        raise ConfigurationError("--timeout must be positive")
    return Endpoint(base_url=url, model=name, api_key=key, timeout=timeout, user_info=user_info)


def read_key_file(path: str, *, flag: str = "--api-key-file") -> str:
    """The key on the first line of the file ``path``, stripped (a UTF-8 BOM too).

    Raises ConfigurationError naming ``flag`` and the path when the file is missing, cannot be
    read, is not UTF-8 text, or its first line is empty or longer than :data:`MAX_KEY_LINE`;
    the message never holds what the file holds.
    """
    where = f"{flag} {path}"
    try:
        with Path(path).open(encoding="utf-8-sig") as file:
            line = file.readline(MAX_KEY_LINE + 1)
    except FileNotFoundError:
        raise ConfigurationError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigurationError(f"{where}: a folder, not a file") from None
    except UnicodeDecodeError:
        raise ConfigurationError(
            f"{where}: not UTF-8 text; put the key on its first line"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(line) > MAX_KEY_LINE:
        raise ConfigurationError(
            f"{where}: its first line is longer than {MAX_KEY_LINE} characters; put the key "
            "alone on the first line"
        )
    key = line.strip()
    if not key:
        raise ConfigurationError(f"{where}: its first line is empty; put the key on it")
    return key


def map_chat_body(
    body: dict[str, Any],
    *,
    model: str,
    tools: list[dict[str, Any]],
    completion_params: dict[str, Any],
    limit_field: str,
) -> dict[str, Any]:
    """The OpenAI chat body for one of the kit's (see the module's docstring)."""
    out: dict[str, Any] = {"model": model}
    for key, value in body.items():
        if key in DROPPED:
            continue
        if key in KIT_FILLERS and value == KIT_FILLERS[key] and key not in completion_params:
            continue
        out[key] = value
    if "max_tokens" in out and limit_field != "max_tokens":
        out[limit_field] = out.pop("max_tokens")
    if tools and "tools" not in out:
        out["tools"] = tools
    return out


@dataclass(frozen=True)
class EndpointFailure:
    """A chat call the endpoint did not answer with a completion: ``kind`` (the summary's
    category), a message saying what happened and the fix, the endpoint's status if it gave
    one, whether every row would fail the same way (``systemic``) and whether the kit may try
    the call again (``retryable``)."""

    kind: str
    message: str
    status: int | None = None
    systemic: bool = False
    retryable: bool = False
    retry_after: str | None = None


def _detail(text: str) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}``), else the
    text, on one line and cut short."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed.get("detail"))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            text = str(error)
    text = " ".join(text.split())
    return (text[:300] + "...") if len(text) > 300 else (text or "(no message)")


def classify_status(endpoint: Endpoint, status: int, text: str, headers: Any) -> EndpointFailure:
    """The failure an error answer of the endpoint means."""
    detail = endpoint.redact(_detail(text))
    where = f"the endpoint {endpoint.shown()}"
    if status in (401, 403):
        if endpoint.authorization is None:
            fix = "no key was sent: set OPENAI_API_KEY or pass --api-key-file or --api-key"
        elif endpoint.api_key is None:
            fix = (
                "the user info of --base-url was sent as HTTP Basic auth; if the endpoint wants "
                "a key, remove user:password@ and set OPENAI_API_KEY or pass --api-key-file"
            )
        else:
            fix = (
                "pass a valid key with OPENAI_API_KEY, --api-key-file or --api-key (the key "
                "must belong to this endpoint)"
            )
        return EndpointFailure(
            "unauthorized",
            f"{where} refused the API key (HTTP {status}): {detail}. Fix: {fix}",
            status,
            systemic=True,
        )
    if status == 404:
        return EndpointFailure(
            "model_not_found",
            f"{where} answered HTTP 404 for model {endpoint.model!r}: {detail}. Fix: pass "
            f"--model with a model it serves (GET {endpoint.shown('/models')} lists them), and "
            "check that --base-url ends with the API's path (e.g. http://localhost:8000/v1)",
            status,
            systemic=True,
        )
    if status == 429:
        no_quota = "quota" in detail.lower() or "billing" in detail.lower()
        fix = (
            "add credit or raise the quota of the account"
            if no_quota
            else "lower --concurrency, test fewer rows (--limit), or wait for the limit to reset"
        )
        return EndpointFailure(
            "rate_limited",
            f"{where} rate-limited the call (HTTP 429): {detail}. Fix: {fix}",
            status,
            systemic=no_quota,
            retryable=not no_quota,
            retry_after=headers.get("retry-after") if headers is not None else None,
        )
    if status in (400, 422):
        return EndpointFailure(
            "bad_request",
            f"{where} refused the request (HTTP {status}): {detail}. Fix: if it names a "
            "parameter, this model does not take it: leave it out of --temperature/--max-tokens "
            "or the agent's ctx.chat(...) params; if it names a tool, fix the agent's get_tools",
            status,
        )
    if status >= 500 or status == 408:
        return EndpointFailure(
            "server_error",
            f"{where} failed (HTTP {status}): {detail}. Fix: retry later, or check the "
            "server's logs",
            status,
            retryable=True,
        )
    return EndpointFailure("endpoint_error", f"{where} answered HTTP {status}: {detail}", status)


def classify_exception(endpoint: Endpoint, exc: Exception) -> EndpointFailure:
    """The failure an exception of the HTTP stack means (a timeout, no connection, or another
    error of the stack: a bad URL), its message without the endpoint's credentials."""
    import httpx

    if not isinstance(exc, httpx.HTTPError):
        return EndpointFailure(
            "endpoint_error",
            f"the call to the endpoint {endpoint.shown()} failed: {type(exc).__name__}: "
            f"{endpoint.redact(str(exc))}. Fix: check --base-url",
            systemic=True,
        )
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return EndpointFailure(
            "timeout",
            f"the endpoint {endpoint.shown()} did not answer within {endpoint.timeout:g} s. "
            "Fix: raise --timeout, lower --max-tokens, or check that the server is not "
            "overloaded",
        )
    return EndpointFailure(
        "unreachable",
        f"cannot reach the endpoint {endpoint.shown()}: {endpoint.redact(str(exc))}. Fix: "
        "check --base-url and that the server is running and reachable from here",
        systemic=True,
    )


ABORTED = EndpointFailure("aborted", "aborted by the user (interactive mode)")


def _bad_answer(endpoint: Endpoint, why: str) -> EndpointFailure:
    return EndpointFailure(
        "bad_answer",
        f"the endpoint {endpoint.shown()} answered 200 with {why}, not a chat completion. "
        "Fix: check that --base-url is the base of an OpenAI-compatible API (it ends in /v1 "
        "for vLLM, SGLang, Ollama and LiteLLM)",
    )


# ---------------------------------------------------------------------------- the app


class Interactor(Protocol):
    """What ``--interactive`` does at each chat call (awaited on the forwarder's loop)."""

    async def before(
        self, rollout_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> None:
        """Before the call is forwarded: ``messages`` is the conversation being sent."""

    async def after(self, rollout_id: str, answer: dict[str, Any]) -> bool:
        """After the endpoint answered; False aborts the rollout."""


@dataclass
class _Rollout:
    completion_params: dict[str, Any]
    tools: Slot[list[dict[str, Any]]] = field(default_factory=Slot)
    result: Slot[dict[str, Any]] = field(default_factory=Slot)
    failure: EndpointFailure | None = None


class ForwardingTrainGate:
    """The local TrainGate's state and its FastAPI app (``.app``).

    The runner calls :meth:`expect` before a rollout's init, :meth:`set_tools` with its init
    answer, and awaits :meth:`result`. ``transport`` is a seam (tests, or another stack); by
    default the kit's :class:`~rollout_sdk.traingate.transport.AiohttpTransport`, built on the
    server's loop and closed when it stops.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        callback_key: str,
        interactor: Interactor | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.callback_key = callback_key
        self._expected = f"Bearer {callback_key}".encode()
        self.interactor = interactor
        self.token_field = "max_completion_tokens" if endpoint.is_openai else "max_tokens"
        self.forwarded = 0
        self._given = transport
        self._transport = transport
        self._lock = threading.Lock()
        self._rollouts: dict[str, _Rollout] = {}
        self._tripped: EndpointFailure | None = None
        self.app = self._build()

    # ------------------------------------------------------------------ the runner's side

    def expect(self, rollout_id: str, completion_params: dict[str, Any]) -> None:
        """Get ready for ``rollout_id`` (before its init is posted)."""
        with self._lock:
            self._rollouts[rollout_id] = _Rollout(dict(completion_params))

    def set_tools(self, rollout_id: str, tools: list[dict[str, Any]]) -> None:
        """The tools ``rollout_id``'s init answered with (sent with each of its chat calls)."""
        self._rollouts[rollout_id].tools.set(tools)

    async def result(self, rollout_id: str) -> dict[str, Any]:
        """``rollout_id``'s final response, once the kit has sent it."""
        return await self._rollouts[rollout_id].result.wait()

    def failure(self, rollout_id: str) -> EndpointFailure | None:
        """The endpoint failure that ended ``rollout_id``'s last chat call, if it failed."""
        state = self._rollouts.get(rollout_id)
        return None if state is None else state.failure

    @property
    def tripped(self) -> EndpointFailure | None:
        """The systemic failure that stopped the run, if one did."""
        return self._tripped

    # ------------------------------------------------------------------ forwarding

    def _http(self) -> httpx.AsyncBaseTransport:
        if self._transport is None:
            from rollout_sdk.settings import get_settings
            from rollout_sdk.traingate.outbound import OutboundPolicy, Reach
            from rollout_sdk.traingate.transport import AiohttpTransport

            # The endpoint is the user's own (often on loopback), but never link-local unless
            # they say so, and its answers are capped as TrainGate's are.
            policy = OutboundPolicy.from_settings(get_settings().kit, where=Reach.PRIVATE)
            self._transport = AiohttpTransport(max_connections=64, policy=policy)
        return self._transport

    async def _post(self, body: dict[str, Any]) -> httpx.Response:
        import httpx

        from rollout_sdk.traingate.transport import send

        headers = [(b"Content-Type", b"application/json"), (b"Accept", b"application/json")]
        if self.endpoint.authorization is not None:
            headers.append((b"Authorization", self.endpoint.authorization))
        timeout = self.endpoint.timeout
        request = httpx.Request(
            "POST",
            self.endpoint.chat_url,
            headers=headers,
            content=json.dumps(body, ensure_ascii=False).encode(),
            extensions={"timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout)},
        )
        # As the TrainGate client sends: once more at once when a pooled connection the
        # endpoint had closed failed before any answer.
        return await send(self._http(), request)

    async def forward(
        self, body: dict[str, Any], tools: list[dict[str, Any]], params: dict[str, Any]
    ) -> dict[str, Any] | EndpointFailure:
        """Send one of the kit's chat bodies to the endpoint: its completion, or the failure."""
        import httpx

        for attempt in range(2):
            sent_field = self.token_field
            mapped = map_chat_body(
                body,
                model=self.endpoint.model,
                tools=tools,
                completion_params=params,
                limit_field=sent_field,
            )
            log.debug("forwarding a chat call: %s", sorted(mapped))
            try:
                answer = await asyncio.wait_for(
                    self._post(mapped), timeout=self.endpoint.timeout + 5
                )
            except (httpx.HTTPError, TimeoutError) as exc:
                if isinstance(exc, TimeoutError):
                    exc = httpx.ReadTimeout(str(exc) or "no answer")
                return classify_exception(self.endpoint, exc)
            except Exception as exc:  # the HTTP stack's other errors: said (redacted), no traceback
                return classify_exception(self.endpoint, exc)
            self.forwarded += 1
            if answer.status_code == 200:
                try:
                    parsed = answer.json()
                except ValueError:
                    return _bad_answer(self.endpoint, "a body that is not JSON")
                if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
                    return _bad_answer(self.endpoint, "JSON without 'choices'")
                if not parsed["choices"]:
                    return _bad_answer(self.endpoint, "no choices")
                return parsed
            text = answer.text
            names_field = "max_tokens" in mapped or "max_completion_tokens" in mapped
            if answer.status_code == 400 and attempt == 0 and names_field and sent_field in text:
                # The model wants the other name for the token limit: use it from now on.
                other = (
                    "max_tokens"
                    if sent_field == "max_completion_tokens"
                    else "max_completion_tokens"
                )
                log.debug("the endpoint refused %s; sending %s instead", sent_field, other)
                self.token_field = other
                continue
            return classify_status(self.endpoint, answer.status_code, text, answer.headers)
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns

    def _refuse(self, state: _Rollout, failure: EndpointFailure) -> Response:
        state.failure = failure
        if failure.systemic and self._tripped is None:
            self._tripped = failure
        if failure.retryable:
            status = 429 if failure.kind == "rate_limited" else 502
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
            return JSONResponse({"detail": failure.message}, status, headers=headers)
        return JSONResponse({"detail": failure.message}, FINAL_STATUS)

    # ------------------------------------------------------------------ app

    def _authorised(self, request: Request) -> bool:
        # The header's bytes as sent (Starlette decodes them as latin-1), compared in constant
        # time; a missing header is an empty one.
        presented = request.headers.get("authorization", "").encode("latin-1")
        return hmac.compare_digest(presented, self._expected)

    def _build(self) -> FastAPI:
        @asynccontextmanager
        async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
            try:
                yield
            finally:
                transport, self._transport = self._transport, self._given
                if transport is not None and transport is not self._given:
                    await transport.aclose()

        app = FastAPI(
            title="rollout-sdk local TrainGate",
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
            lifespan=lifespan,
        )

        async def body_of(request: Request) -> tuple[dict[str, Any], _Rollout] | Response:
            if not self._authorised(request):
                return JSONResponse({"detail": "bad callback key"}, 401)
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"detail": "the body is not JSON"}, 400)
            state = (
                self._rollouts.get(str(body.get("rollout_id"))) if isinstance(body, dict) else None
            )
            if state is None:
                return JSONResponse({"detail": "not a rollout of this run"}, 404)
            return body, state

        @app.post("/v1/chat/completions", response_model=None)
        async def chat(request: Request) -> Response | dict[str, Any]:
            got = await body_of(request)
            if isinstance(got, Response):
                return got
            body, state = got
            rollout_id = str(body["rollout_id"])
            try:
                async with asyncio.timeout(TOOLS_WAIT_SECONDS):
                    tools = await state.tools.wait()
            except TimeoutError:
                return JSONResponse({"detail": "the rollout's init never answered"}, 409)
            if self._tripped is not None:
                return self._refuse(state, self._tripped)
            if self.interactor is not None:
                await self.interactor.before(rollout_id, list(body.get("messages") or []), tools)
            outcome = await self.forward(body, tools, state.completion_params)
            if isinstance(outcome, EndpointFailure):
                return self._refuse(state, outcome)
            if self.interactor is not None and not await self.interactor.after(rollout_id, outcome):
                return self._refuse(state, ABORTED)
            state.failure = None
            return outcome

        @app.post("/v1/rollout/completed", response_model=None)
        async def completed(request: Request) -> Response | dict[str, Any]:
            got = await body_of(request)
            if isinstance(got, Response):
                return got
            body, state = got
            state.result.set(body)
            return {"status": "ok"}

        return app
