"""An ASGI request's scope, for calling an app directly (no HTTP server, no client)."""

from __future__ import annotations

from typing import Any


def http_scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The scope of a ``POST path`` over HTTP/1.1 from a loopback client, with ``headers``."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("rollout.test", 80),
    }
