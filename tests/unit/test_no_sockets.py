"""The unit tier's guard against network use actually guards."""

from __future__ import annotations

import socket

import httpx
import pytest

from .support import SocketUsed


def test_connecting_a_socket_fails() -> None:
    with pytest.raises(SocketUsed, match="must not use sockets"):
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)


def test_listening_fails() -> None:
    with socket.socket() as sock, pytest.raises(SocketUsed):
        sock.bind(("127.0.0.1", 0))


def causes(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and everything it was raised from, exception groups included."""
    found: list[BaseException] = []
    pending = [exc]
    while pending:
        current = pending.pop()
        if current is None or current in found:
            continue
        found.append(current)
        pending += [current.__cause__, current.__context__]
        if isinstance(current, BaseExceptionGroup):
            pending += list(current.exceptions)
    return found


async def test_a_real_http_transport_cannot_reach_out() -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ConnectError) as caught:
            await http.get("http://127.0.0.1:9/")
    # Refused by the guard, not by the network.
    assert any(isinstance(e, SocketUsed) for e in causes(caught.value))
