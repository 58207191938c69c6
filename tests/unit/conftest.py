"""Unit tests use no sockets: connecting or binding one fails the test at once."""

from __future__ import annotations

import socket
from typing import Any, NoReturn

import pytest

from .support import SocketUsed


def _refuse(self: socket.socket, *args: Any, **kwargs: Any) -> NoReturn:
    raise SocketUsed(f"unit tests must not use sockets (tried {args!r})")


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    # The event loop's own self-pipe is a socketpair, which neither connects nor binds.
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, _refuse)
