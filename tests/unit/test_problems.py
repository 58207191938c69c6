"""The exception tree and the one table from kit exception to HTTP answer."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import httpx
import pytest

import rollout_sdk
from rollout_sdk import errors
from rollout_sdk.errors import (
    AgentLoopNotFoundError,
    AgentLoopValidationError,
    AgentToolsError,
    CancelSelectorRefused,
    ConfigurationError,
    DispatchError,
    EndpointDisabled,
    IdempotencyConflict,
    MisdirectedRequest,
    OsmosisRolloutError,
    OsmosisServerError,
    OsmosisTimeoutError,
    OsmosisTransportError,
    OsmosisValidationError,
    Overloaded,
    PayloadTooLarge,
    PollLeaseRefused,
    ProtocolNotServed,
    RecordTooLarge,
    RequestRejected,
    RolloutAlreadyFinished,
    RolloutCancelled,
    RolloutError,
    RolloutIdTaken,
    RolloutNotFound,
    ServerKeyMissing,
    ServerKeyUnavailable,
    ServerUrlRefused,
    StoreError,
    ToolArgumentError,
    ToolExecutionError,
    Unauthorized,
    UnsupportedMediaType,
)
from rollout_sdk.http.problems import PROBLEMS, problem_for, render

#: Every answer a client can get from the kit's errors: status, headers, body. (The messages are
#: the exception's own, or built around it.)
ANSWERS: list[tuple[RolloutError, int, dict[str, str], object]] = [
    (
        Unauthorized(),
        401,
        {"www-authenticate": "Bearer"},
        {"detail": "Invalid or missing API key: send 'Authorization: Bearer <server key>'"},
    ),
    (EndpointDisabled("off"), 404, {}, {"detail": "off"}),
    (MisdirectedRequest("not mine"), 421, {}, {"detail": "not mine"}),
    (
        ServerKeyUnavailable(),
        503,
        {"retry-after": "5"},
        {"detail": "the server key could not be read; retry shortly"},
    ),
    (
        ServerKeyMissing(),
        503,
        {},
        {"detail": "no server key is configured in the key source; refusing"},
    ),
    (UnsupportedMediaType("not json"), 415, {}, {"detail": "not json"}),
    (PayloadTooLarge("too big"), 413, {}, {"detail": "too big"}),
    (
        ServerUrlRefused("not allowed"),
        422,
        {},
        {"detail": [{"type": "value_error", "loc": ["body", "server_url"], "msg": "not allowed"}]},
    ),
    (
        IdempotencyConflict("differs", ["max_turns"]),
        409,
        {},
        {"detail": "differs", "fields": ["max_turns"]},
    ),
    (
        AgentToolsError("boom"),
        500,
        {},
        {"detail": "the agent loop could not provide its tools: boom"},
    ),
    (
        Overloaded("full", 7),
        429,
        {"retry-after": "7"},
        {"detail": "too many rollouts: full; retry the same init after 7 s"},
    ),
    (
        DispatchError("x"),
        503,
        {"retry-after": "1"},
        {"detail": "could not start the rollout: x; retry the same init"},
    ),
    (
        StoreError("disk"),
        503,
        {"retry-after": "1"},
        {"detail": "the record store failed: disk; retry the same init"},
    ),
    (RecordTooLarge("key too long"), 413, {}, {"detail": "key too long"}),
    (RolloutNotFound("no r1"), 404, {}, {"detail": "no r1"}),
    (RolloutAlreadyFinished("done"), 409, {}, {"detail": "done"}),
    (RolloutIdTaken("taken"), 409, {}, {"detail": "taken"}),
    (PollLeaseRefused("invalid polling lease"), 403, {}, {"detail": "invalid polling lease"}),
    (CancelSelectorRefused("one"), 422, {}, {"detail": "one"}),
    (ProtocolNotServed("v1 only"), 404, {}, {"detail": "v1 only"}),
]


@pytest.mark.parametrize(
    ("exc", "status", "headers", "body"), ANSWERS, ids=[type(a[0]).__name__ for a in ANSWERS]
)
def test_each_kit_error_has_the_answer_it_always_had(
    exc: RolloutError, status: int, headers: dict[str, str], body: object
) -> None:
    response = render(exc)
    assert response.status_code == status
    extra = {
        k.decode(): v.decode()
        for k, v in response.raw_headers
        if k not in (b"content-length", b"content-type")
    }
    assert extra == headers
    assert response.headers["content-type"] == "application/json"
    assert json.loads(bytes(response.body)) == body


def test_the_table_holds_exactly_the_answers_above() -> None:
    assert set(PROBLEMS) == {type(a[0]) for a in ANSWERS}


def test_every_refusal_is_an_http_answer_and_nothing_else_of_the_tree_is() -> None:
    for kind in RequestRejected.__subclasses__():
        assert problem_for(kind("x")) is not None, kind
    # Not an answer: these propagate as a 500 with a logged traceback, as any bug does.
    for exc in (ConfigurationError("x"), OsmosisTimeoutError("x"), RolloutError("x")):
        assert problem_for(exc) is None
        with pytest.raises(LookupError):
            render(exc)


def test_a_subclass_takes_the_answer_of_its_nearest_class_in_the_table() -> None:
    assert problem_for(Overloaded("full", 3)) is PROBLEMS[Overloaded]  # not DispatchError's 503

    class Flaky(StoreError):
        pass

    assert render(Flaky("x")).status_code == 503


def test_the_v1_names_keep_their_v1_bases() -> None:
    v1_children = (
        OsmosisTransportError,
        OsmosisServerError,
        OsmosisValidationError,
        OsmosisTimeoutError,
        AgentLoopNotFoundError,
        AgentLoopValidationError,
        RolloutCancelled,
        ToolExecutionError,
    )
    for kind in v1_children:
        assert kind.__bases__ == (OsmosisRolloutError,), kind
    assert ToolArgumentError.__bases__ == (ToolExecutionError,)
    assert OsmosisRolloutError.__bases__ == (RolloutError,)
    assert OsmosisServerError("x", status_code=502).status_code == 502
    assert AgentLoopNotFoundError("a", ["b"]).available == ["b"]
    assert ToolExecutionError("x", tool_call_id="c", tool_name="t").tool_name == "t"


def test_every_kit_exception_is_defined_in_errors_and_derives_from_the_root() -> None:
    outside = []
    for module in pkgutil.walk_packages(rollout_sdk.__path__, prefix="rollout_sdk."):
        if module.name in ("rollout_sdk.__main__", "rollout_sdk.errors"):
            continue  # the first runs the CLI
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if not (inspect.isclass(value) and issubclass(value, BaseException)):
                continue
            if value.__module__ != module.name or name.startswith("_"):
                continue  # imported, or private control flow of one module
            if module.name == "rollout_sdk.traingate.transport" and issubclass(
                value, httpx.HTTPError
            ):
                continue  # httpx's tree at the client's transport seam, translated by the client
            outside.append(f"{module.name}.{name}")
    assert outside == []
    for value in vars(errors).values():
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, RolloutError), value
