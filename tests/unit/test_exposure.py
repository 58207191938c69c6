"""Who may reach a local server: the bind rule, and the names the Host check admits."""

from __future__ import annotations

import pytest

from rollout_sdk.errors import ServeError
from rollout_sdk.http.host_check import HostCheckMiddleware
from rollout_sdk.local.exposure import Exposure, is_loopback


async def _app(scope: object, receive: object, send: object) -> None:  # pragma: no cover
    raise AssertionError("the check alone is under test")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.168.1.5", False),
        ("myhost.local", False),  # a name may resolve anywhere
    ],
)
def test_loopback_binds(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.5", "myhost"])
def test_a_reachable_bind_without_a_key_is_refused_naming_the_fixes(host: str) -> None:
    with pytest.raises(ServeError) as refused:
        Exposure(host, 9000, keyed=False).check()
    message = str(refused.value)
    assert "--api-key" in message
    assert "--allow-unauthenticated" in message
    assert "ROLLOUT_SDK_SERVER_KEY" in message


def test_serve_agent_loop_names_its_own_arguments() -> None:
    with pytest.raises(ServeError) as refused:
        Exposure("0.0.0.0", 9000, keyed=False).check(
            flag="allow_unauthenticated=True", key_hint="api_key=..."
        )
    assert "allow_unauthenticated=True" in str(refused.value)
    assert "api_key=..." in str(refused.value)


@pytest.mark.parametrize(
    "exposure",
    [
        Exposure("0.0.0.0", 9000, keyed=True),
        Exposure("0.0.0.0", 9000, keyed=False, allow_unauthenticated=True),
        Exposure("127.0.0.1", 9000, keyed=False),
        Exposure("localhost", 9000, keyed=False),
    ],
)
def test_a_key_loopback_or_the_opt_out_may_start(exposure: Exposure) -> None:
    exposure.check()


def test_a_loopback_server_checks_its_names_and_the_extra_ones() -> None:
    assert Exposure("127.0.0.1", 9000, keyed=False).host_check() == (
        "localhost",
        "127.0.0.1",
        "::1",
    )
    assert Exposure("127.0.0.2", 9000, keyed=True, allowed_hosts=("dev.test",)).host_check() == (
        "localhost",
        "127.0.0.1",
        "::1",
        "dev.test",
        "127.0.0.2",
    )


def test_another_bind_checks_only_when_given_names() -> None:
    assert Exposure("0.0.0.0", 9000, keyed=True).host_check() is None
    checked = Exposure("0.0.0.0", 9000, keyed=True, allowed_hosts=("box.lan",)).host_check()
    assert checked is not None and "box.lan" in checked and "0.0.0.0" not in checked
    assert "192.168.1.5" in (
        Exposure("192.168.1.5", 9000, keyed=True, allowed_hosts=("box.lan",)).host_check() or ()
    )


def test_a_bad_allowed_host_is_refused_naming_the_flag() -> None:
    with pytest.raises(ServeError, match=r"--allowed-host.*port"):
        Exposure("127.0.0.1", 9000, keyed=False, allowed_hosts=("dev.test:http",))


@pytest.mark.parametrize(
    ("header", "admitted"),
    [
        (b"127.0.0.1:9000", True),
        (b"127.0.0.1", True),
        (b"localhost:9000", True),
        (b"LocalHost.:9000", True),
        (b"[::1]:9000", True),
        (b"[::1]", True),
        (b"dev.test:9000", True),
        (b"proxy.test:443", True),
        (b"proxy.test:80", False),  # a host:port entry admits that port only
        (b"rebind.attacker.example:9000", False),
        (b"localhost.attacker.example", False),
        (b"127.0.0.1.nip.io:9000", False),
        (b"127.0.0.1:notaport", False),
        (b"", False),
        (None, False),
        ("l\u00f6calhost".encode(), False),
    ],
)
def test_the_host_check_admits_only_named_hosts(header: bytes | None, admitted: bool) -> None:
    check = HostCheckMiddleware(
        _app, allowed=("localhost", "127.0.0.1", "::1", "dev.test", "proxy.test:443")
    )
    assert check.admits(header) is admitted


def test_the_host_check_needs_a_name() -> None:
    with pytest.raises(ValueError, match="at least one"):
        HostCheckMiddleware(_app, allowed=())


def test_the_host_check_keeps_each_verdict_and_stays_bounded() -> None:
    check = HostCheckMiddleware(_app, allowed=("localhost",))
    for _ in range(2):  # the second round answers from what the first decided
        assert check.admits(b"localhost:9000") is True
        assert check.admits(b"rebind.attacker.example") is False
    for n in range(1000):
        assert check.admits(f"h{n}.attacker.example".encode()) is False
    assert len(check._seen) <= 256
    assert check.admits(b"localhost:9000") is True
