"""``POST /v1/rollout/init`` as a lean route: a valid init is answered here, without FastAPI's
routing, dependency solving and exception layers; everything else goes on to FastAPI.

Init is the one request TrainGate sends per rollout, so its handling is a share of the server's
CPU per rollout that the other routes are not (``python -m bench.profile``: FastAPI's routing,
its exception middleware and its dependency solving cost about as much as the init service
itself). The route stays declared in FastAPI (the OpenAPI document, ``/docs`` and schemathesis
see it as before), and every answer but the valid init's 202 still comes from there or from the
one error table:

- the body is parsed as FastAPI parses it (``json.loads``, then the model validated from Python
  objects), so what FastAPI refuses is refused here too; when parsing or validation fails, the
  request goes on to FastAPI with its body replayed, and FastAPI's own 422 answers it;
- a kit error the init service raises is answered by :func:`~rollout_sdk.http.problems.send_problem`,
  the same rendering FastAPI's handler gives it; any other exception propagates, a 500, as it
  would from the route;
- the 202 is FastAPI's bytes: the response model dumped by alias, ``application/json`` with its
  length (``tests/unit/test_init_route.py`` compares the two routes answer for answer).

It sits inside the server key, the Host check and admission (413, 415, the init's counts), so it
sees only what those let through.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import ValidationError

from rollout_sdk.errors import RolloutError
from rollout_sdk.http.admission import INIT_PATH, replaying
from rollout_sdk.http.auth import request_paths
from rollout_sdk.http.problems import problem_for, send_problem
from rollout_sdk.protocol import RolloutRequest

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from rollout_sdk.engine.service import RolloutService


class LeanInitRoute:
    """Answers a valid ``POST /v1/rollout/init`` through ``service``; passes anything else to
    ``app``. Add it before the admission middleware, so it runs inside it."""

    def __init__(self, app: ASGIApp, *, service: RolloutService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or request_paths(scope)[0] != INIT_PATH
        ):
            await self.app(scope, receive, send)
            return
        messages, body = await _read(receive)
        request = _parsed(body)
        if request is None:
            await self.app(scope, replaying(messages, receive), send)
            return
        try:
            answer = await self.service.init(request)
        except RolloutError as exc:
            if problem_for(exc) is None:
                raise
            await send_problem(scope, receive, send, exc)
            return
        content = answer.model_dump_json(by_alias=True).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 202,
                "headers": [
                    (b"content-length", str(len(content)).encode()),
                    (b"content-type", b"application/json"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": content})


async def _read(receive: Receive) -> tuple[list[Message], bytes]:
    """The request's messages up to its last body part (or a disconnect), and the body."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    return messages, b"".join(m.get("body", b"") for m in messages)


def _parsed(body: bytes) -> RolloutRequest | None:
    """The init, parsed and validated as FastAPI would; None when FastAPI would refuse it."""
    try:
        # FastAPI parses with json.loads and validates the objects: the same two steps, so the
        # same bodies pass (pydantic's own JSON parser differs at the edges, NaN for one).
        return RolloutRequest.model_validate(json.loads(body))
    except (ValueError, ValidationError):  # JSONDecodeError and UnicodeDecodeError included
        return None
