"""Bad inits: each refused with the right 4xx, nothing stored, nothing run."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from testkit.rigs import (
    AUTH,
    LocalRig,
    record_of,
    rollout_body,
)
from testkit.scenarios.base import (
    Row,
    blocking,
)


@dataclass(frozen=True)
class BadInit:
    """One bad init: what is sent, the statuses that are right, what the answer must name."""

    what: str
    statuses: tuple[int, ...]
    names: str | None
    body: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    probe: str | None = None


def _bad_inits(traingate_url: str, tag: str) -> list[BadInit]:
    def rid(n: int) -> str:
        return f"bad-{tag}-{n:02d}"

    def good(n: int, **changes: Any) -> dict[str, Any]:
        return {**rollout_body(rid(n), traingate_url), **changes}

    def probed(
        n: int,
        what: str,
        statuses: tuple[int, ...],
        names: str | None,
        *,
        headers: dict[str, str] | None = None,
        raw_headers: list[tuple[bytes, bytes]] | None = None,
        **changes: Any,
    ) -> BadInit:
        """Init ``n``'s good body but for ``changes``: its id must find no record and no run."""
        return BadInit(
            what,
            statuses,
            names,
            body=good(n, **changes),
            headers=headers or {},
            raw_headers=raw_headers or [],
            probe=rid(n),
        )

    missing = good(3)
    del missing["messages"]
    big_metadata = {"padding": "x" * (1024 * 1024 + 1024)}
    big_body = [{"role": "user", "content": "y" * (7 * 1024 * 1024)}]
    return [
        BadInit(
            "malformed JSON",
            (400, 422),
            "body",
            content=b'{"rollout_id": "x", ',
            headers={"Content-Type": "application/json"},
        ),
        BadInit("a JSON array, not an object", (422,), "body", body=[good(2)]),
        BadInit("missing field messages", (422,), "messages", body=missing, probe=rid(3)),
        probed(4, "wrong type: max_turns a string", (422,), "max_turns", max_turns="ten"),
        probed(5, "wrong type: messages a string", (422,), "messages", messages="hi"),
        BadInit("blank rollout_id", (422,), "rollout_id", body=good(6, rollout_id="   ")),
        BadInit(
            "257-character rollout_id", (422,), "rollout_id", body=good(7, rollout_id="r" * 257)
        ),
        probed(8, "server_url not http(s)", (422,), "server_url", server_url="ftp://127.0.0.1:1"),
        probed(9, "server_url with no host", (422,), "server_url", server_url="http://"),
        probed(
            10,
            "server_url link-local (cloud metadata)",
            (422,),
            "server_url",
            server_url="http://169.254.169.254",
        ),
        probed(
            11,
            "metadata over 1 MiB",
            (413,),
            "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES",
            metadata=big_metadata,
        ),
        probed(12, "body over 6 MiB", (413,), "ROLLOUT_SDK_MAX_BODY_BYTES", messages=big_body),
        BadInit(
            "content type text/plain",
            (415,),
            "application/json",
            content=json.dumps(good(13)).encode(),
            headers={"Content-Type": "text/plain"},
            probe=rid(13),
        ),
        probed(14, "no Authorization header", (401,), None, headers={"Authorization": ""}),
        probed(
            15, "wrong server key", (401,), None, headers={"Authorization": "Bearer not-the-key"}
        ),
        probed(
            16,
            "malformed Authorization (Basic)",
            (401,),
            None,
            headers={"Authorization": "Basic dXNlcjpwYXNz"},
        ),
        probed(
            17,
            "non-ASCII bytes in Authorization",
            (401,),
            None,
            raw_headers=[(b"authorization", b"Bearer \xff\xfe\xe9t\xe9")],
        ),
    ]


@blocking
async def run_bad_input(rig: LocalRig) -> Row:
    """Bad inits: each refused with the right 4xx, nothing stored, nothing run."""
    row = Row(
        "local: bad input at init (malformed JSON, wrong types, bad ids and URLs, oversize, "
        "wrong content type, bad keys)",
        "4xx naming the field (401 before the body); nothing stored, run or reported",
        distinct=False,
    )
    tag = secrets.token_hex(3)
    cases = _bad_inits(rig.traingate_url, tag)
    codes: Counter[int] = Counter()
    async with rig.client() as client:
        for case in cases:
            headers = {k: v for k, v in {**AUTH, **case.headers}.items() if v}
            content = case.content
            if case.body is not None:
                content = json.dumps(case.body).encode()
                headers.setdefault("Content-Type", "application/json")
            request = client.build_request(
                "POST", "/v1/rollout/init", content=content, headers=headers
            )
            if not case.headers.get("Authorization", "x"):
                del request.headers["authorization"]
            if case.raw_headers:
                names = {name.lower() for name, _ in case.raw_headers}
                kept = [(k, v) for k, v in request.headers.raw if k.lower() not in names]
                request.headers = httpx.Headers([*kept, *case.raw_headers])
            response = await client.send(request)
            codes[response.status_code] += 1
            row.check(
                response.status_code in case.statuses,
                f"{case.what}: {response.status_code} {response.text[:200]}, "
                f"expected {case.statuses}",
            )
            if case.names is not None:
                row.check(
                    case.names in response.text,
                    f"{case.what}: the answer does not name {case.names}: {response.text[:200]}",
                )
            if case.probe is not None and not row.check(
                await record_of(client, case.probe) is None,
                f"{case.what}: a record of {case.probe} was stored",
            ):
                row.counts["stored"] += 1
    await asyncio.sleep(0.5)  # room for a run, if one had been started
    for case in cases:
        if case.probe is not None:
            calls = rig.standin.calls_for("chat", case.probe)
            calls += rig.standin.calls_for("completed", case.probe)
            if not row.check(not calls, f"{case.what}: {case.probe} reached TrainGate"):
                row.counts["reached TrainGate"] += 1
    row.sent = len(cases)
    row.measured = (
        f"{len(cases) - len(row.failures)}/{len(cases)} right: "
        + ", ".join(f"{n} x {code}" for code, n in sorted(codes.items()))
        + f"; {row.counts['stored']} stored, {row.counts['reached TrainGate']} reached TrainGate"
    )
    return row
