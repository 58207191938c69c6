"""What a chat call the endpoint did not answer with a completion means, and its fix.

:func:`classify_status` names an error answer, :func:`classify_exception` a failure of the HTTP
stack, :func:`bad_answer` a 200 that is not a chat completion; each as an
:class:`EndpointFailure` whose message says what happened and the fix, never the endpoint's
credentials. A failure every row would hit (a refused key, an unknown model, an unreachable
endpoint, no quota) is ``systemic``: it trips the forwarder, later chat calls fail at once with
the same failure, and the runner starts no more rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rollout_sdk.local.forward.endpoint import Endpoint


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


def bad_answer(endpoint: Endpoint, why: str) -> EndpointFailure:
    return EndpointFailure(
        "bad_answer",
        f"the endpoint {endpoint.shown()} answered 200 with {why}, not a chat completion. "
        "Fix: check that --base-url is the base of an OpenAI-compatible API (it ends in /v1 "
        "for vLLM, SGLang, Ollama and LiteLLM)",
    )
