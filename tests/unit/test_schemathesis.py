"""Schemathesis against the app's own OpenAPI schema, in process (ASGI, no sockets): no
operation ever answers 5xx, with the server key or without it.

The app runs on ``MemoryStore`` and the recording dispatcher, so nothing is called out to, and
``server_url`` may only name 127.0.0.1 (``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS``). Schemathesis
generates both valid and invalid requests (its default modes); a fixed seed and example budget
keep each run the same and short.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

from rollout_sdk.hosts import AllowedHost
from rollout_sdk.http.app import create_app
from rollout_sdk.settings import VARIABLE_PREFIXES, RolloutSettings, load_settings
from rollout_sdk.store.memory import MemoryStore

from .support import EchoAgent, RecordingDispatcher

KEY = "schemathesis-server-key"
PROTECTED = ("/v1/rollout/", "/platform/")
MAX_EXAMPLES = 150


def _settings() -> RolloutSettings:
    # Built at import, before the per-test settings isolation runs: ignore the outer environment.
    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):
            if name.upper().startswith(VARIABLE_PREFIXES):
                env.delenv(name)
        env.setenv("ROLLOUT_SDK_ALLOWED_SERVER_HOSTS", "127.0.0.1")
        return load_settings()


def _app() -> FastAPI:
    return create_app(
        EchoAgent(),
        api_key=KEY,
        store=MemoryStore(),
        dispatcher=RecordingDispatcher(),
        settings=_settings(),
    )


APP = _app()
# The schema needs the server key like every route but /health.
schema = schemathesis.openapi.from_asgi(
    "/openapi.json", APP, headers={"Authorization": f"Bearer {KEY}"}
)
schema.config.generation.update(max_examples=MAX_EXAMPLES, deterministic=True)

# A random string is almost never an http(s) URL, so on its own schemathesis would stop every
# init at validation. Offer it URLs on the allowed host (which reach the store and the
# dispatcher) and URLs the policy refuses, besides the string it generated.
ALLOWED_URLS = st.builds(
    "{}://127.0.0.1{}/{}".format,
    st.sampled_from(["http", "https", "HTTP"]),
    st.sampled_from(["", ":1", ":8080", ":65535"]),
    st.text(max_size=20),
)
REFUSED_URLS = st.sampled_from(
    [
        "http://traingate.test/base",
        "http://169.254.169.254/latest/meta-data",
        "http://[fe80::1%25eth0]:8080",
        "http://[::ffff:169.254.169.254]",
        "http://0xa9fea9fe/",
        "http://127.0.0.1.example.test",
        "http://[::1]",
    ]
)


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


# Values Python's json module reads but that cannot be stored or sent on (schemathesis' own
# strings never hold surrogates), placed where the schema allows anything, and in a string.
HOSTILE = st.sampled_from(["\ud800", "a\udfffb", {"\udc00": 1}, nested(80), nested(400)])
FREE_FORM: dict[str, Callable[[Any], Any]] = {
    "messages": lambda v: [{"role": "user", "content": v}],
    "completion_params": lambda v: {"temperature": v},
    "metadata": lambda v: {"ground_truth": v},
    "idempotency_key": lambda v: v,
}


def with_hostile_value(body: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    return {**body, field: FREE_FORM[field](value)}


@schema.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    if not isinstance(body, dict) or "server_url" not in body:
        return st.just(body)
    allowed = ALLOWED_URLS.map(lambda url: {**body, "server_url": url})
    refused = REFUSED_URLS.map(lambda url: {**body, "server_url": url})
    hostile = allowed.flatmap(
        lambda valid: st.builds(
            with_hostile_value, st.just(valid), st.sampled_from(sorted(FREE_FORM)), HOSTILE
        )
    )
    # Allowed URLs twice: most cases should get past the policy to the store and dispatcher.
    return st.one_of(allowed, allowed, refused, hostile, st.just(body))


bounded = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_the_schema_covers_init_and_the_app_is_configured_as_intended() -> None:
    operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
    paths = {operation.path for operation in operations}
    assert {"/v1/rollout/init", "/health", "/platform/health"} <= paths
    services = APP.state.services
    assert services.service.outbound.allowed == (AllowedHost("127.0.0.1"),)
    assert isinstance(services.dispatcher, RecordingDispatcher)


@schema.parametrize()
@bounded
def test_no_operation_answers_5xx_with_the_key(case: schemathesis.Case[Any]) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {KEY}"}, checks=[not_a_server_error])


@schema.parametrize()
@bounded
def test_no_operation_answers_5xx_without_the_key(case: schemathesis.Case[Any]) -> None:
    response = case.call_and_validate(checks=[not_a_server_error])
    if case.path.startswith(PROTECTED):
        assert response.status_code == 401, response.text
