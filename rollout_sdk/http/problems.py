"""The one table from kit exception to HTTP answer: status, headers and body.

The app installs one exception handler over this table (:func:`install_problem_handlers`, beside
FastAPI's 422 for an invalid body), and the
ASGI middlewares, which answer before the app runs, send the same rendering
(:func:`send_problem`). A class missing from the table is not an HTTP answer: it propagates (a
500 from the server, and a logged traceback), as any bug does.

Every answer is JSON; most are ``{"detail": "<message>"}``, a few add fields
(``IdempotencyConflict``'s ``fields``) or use FastAPI's 422 shape (``ServerUrlRefused``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fastapi.exceptions import RequestValidationError
from starlette.responses import JSONResponse

from rollout_sdk.errors import (
    AgentToolsError,
    CancelSelectorRefused,
    DispatchError,
    EndpointDisabled,
    IdempotencyConflict,
    MisdirectedRequest,
    Overloaded,
    PayloadTooLarge,
    PollLeaseRefused,
    ProtocolNotServed,
    RecordTooLarge,
    RolloutAlreadyFinished,
    RolloutError,
    RolloutIdTaken,
    RolloutNotFound,
    ServerKeyMissing,
    ServerKeyUnavailable,
    ServerUrlRefused,
    StoreError,
    Unauthorized,
    UnsupportedMediaType,
)

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.types import Receive, Scope, Send

E = TypeVar("E", bound=RolloutError)
Body = dict[str, Any]


def detail(exc: RolloutError) -> Body:
    """``{"detail": str(exc)}``: the body of most answers."""
    return {"detail": str(exc)}


def no_headers(_: RolloutError) -> dict[str, str]:
    return {}


def retry_after(seconds: int) -> Callable[[RolloutError], dict[str, str]]:
    """A fixed ``Retry-After`` header."""
    headers = {"Retry-After": str(seconds)}
    return lambda _: headers


def detail_around(prefix: str, suffix: str = "") -> Callable[[RolloutError], Body]:
    """``{"detail": prefix + str(exc) + suffix}``."""
    return lambda exc: {"detail": f"{prefix}{exc}{suffix}"}


@dataclass(frozen=True)
class Problem(Generic[E]):
    """How one exception class is answered."""

    status: int
    body: Callable[[E], Body] = detail
    headers: Callable[[E], dict[str, str]] = no_headers


def _entry(kind: type[E], problem: Problem[E]) -> tuple[type[RolloutError], Problem[Any]]:
    # Pairs are built through here so that mypy checks each class against its builders.
    return kind, problem


def _url_refused(exc: ServerUrlRefused) -> Body:
    # FastAPI's 422 shape, with the field named, as for any other invalid field.
    return {"detail": [{"type": "value_error", "loc": ["body", exc.field], "msg": str(exc)}]}


def _conflict(exc: IdempotencyConflict) -> Body:
    return {"detail": str(exc), "fields": exc.fields}


def _overloaded(exc: Overloaded) -> Body:
    return {"detail": f"too many rollouts: {exc}; retry the same init after {exc.retry_after} s"}


def _overloaded_headers(exc: Overloaded) -> dict[str, str]:
    return {"Retry-After": str(exc.retry_after)}


def _retry_init(prefix: str) -> Problem[RolloutError]:
    """503 for a failure a retry of the same init may not meet."""
    return Problem(503, body=detail_around(prefix, "; retry the same init"), headers=retry_after(1))


#: Exception class to answer. A raised exception takes the entry of the first class of its MRO
#: found here (so ``Overloaded`` is 429 although it is a ``DispatchError``).
PROBLEMS: Mapping[type[RolloutError], Problem[Any]] = dict(
    [
        # The server-key middleware's answers.
        _entry(Unauthorized, Problem(401, headers=lambda _: {"WWW-Authenticate": "Bearer"})),
        _entry(EndpointDisabled, Problem(404)),
        # The local server's Host check.
        _entry(MisdirectedRequest, Problem(421)),
        _entry(ServerKeyUnavailable, Problem(503, headers=retry_after(5))),
        _entry(ServerKeyMissing, Problem(503)),
        # The admission middleware's, and init's input rules.
        _entry(UnsupportedMediaType, Problem(415)),
        _entry(PayloadTooLarge, Problem(413)),
        _entry(ServerUrlRefused, Problem(422, body=_url_refused)),
        # The service's.
        _entry(IdempotencyConflict, Problem(409, body=_conflict)),
        _entry(RecordTooLarge, Problem(413)),
        _entry(
            AgentToolsError,
            Problem(500, body=detail_around("the agent loop could not provide its tools: ")),
        ),
        _entry(Overloaded, Problem(429, body=_overloaded, headers=_overloaded_headers)),
        _entry(DispatchError, _retry_init("could not start the rollout: ")),
        _entry(StoreError, _retry_init("the record store failed: ")),
        _entry(RolloutNotFound, Problem(404)),
        _entry(RolloutAlreadyFinished, Problem(409)),
        # The osmosis-ai 0.3.8 routes' own.
        _entry(RolloutIdTaken, Problem(409)),
        _entry(PollLeaseRefused, Problem(403)),
        _entry(CancelSelectorRefused, Problem(422)),
        _entry(ProtocolNotServed, Problem(404)),
    ]
)


def problem_for(exc: BaseException) -> Problem[Any] | None:
    """The table's entry for ``exc``, or None when it is not an HTTP answer."""
    for kind in type(exc).__mro__:
        problem = PROBLEMS.get(kind)
        if problem is not None:
            return problem
    return None


def render(exc: RolloutError) -> JSONResponse:
    """The HTTP answer to ``exc``; LookupError when the table has no entry for it."""
    problem = problem_for(exc)
    if problem is None:
        raise LookupError(f"{type(exc).__name__} is not an HTTP answer")
    return JSONResponse(problem.body(exc), status_code=problem.status, headers=problem.headers(exc))


async def send_problem(scope: Scope, receive: Receive, send: Send, exc: RolloutError) -> None:
    """Answer ``exc`` from an ASGI middleware, without calling the app."""
    await render(exc)(scope, receive, send)


def _printable(text: str) -> str:
    # An unpaired surrogate cannot be encoded as UTF-8; the answer must still go out.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def validation_detail(error: dict[str, Any]) -> dict[str, Any]:
    """One entry of a 422 body: FastAPI's ``type``, ``loc`` and ``msg``, never the ``input``.

    The input is left out: it can hold the callback key, or text that cannot be encoded.
    """
    kind = str(error.get("type", "value_error"))
    loc = [_printable(p) if isinstance(p, str) else p for p in error.get("loc", ())]
    msg = _printable(str(error.get("msg", "invalid")))
    if kind == "json_invalid":
        reason = _printable(str((error.get("ctx") or {}).get("error", "")))
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        msg = f"the body is not valid JSON: {reason}{where}"
    elif loc == ["body"] and kind == "missing":
        msg = "the body is empty: send the RolloutRequest as a JSON object"
    elif loc == ["body"] and kind == "model_attributes_type":
        given = error.get("input")
        what = "null" if given is None else _JSON_KINDS.get(type(given), "a number")
        msg = f"the body must be a JSON object (a RolloutRequest), not {what}"
    return {"type": kind, "loc": loc, "msg": msg}


def install_problem_handlers(app: FastAPI) -> None:
    """Answer FastAPI's invalid bodies (422), and every class of the table through one handler."""

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse(
            {"detail": [validation_detail(dict(e)) for e in exc.errors()]}, status_code=422
        )

    async def answer(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RolloutError)
        return render(exc)

    app.add_exception_handler(RequestValidationError, invalid)
    for kind in PROBLEMS:
        app.add_exception_handler(kind, answer)
