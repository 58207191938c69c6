"""Hosts as the kit compares them: the IP address a host spells (in every form a resolver takes
literally), a host's normal form, and the allowlist's ``host`` / ``host:port`` entries; and a URL
as the kit shows it, its credentials cut (:func:`redact_url`).

A leaf (the standard library only): the settings validate ``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS``
with it, the outbound policy (:mod:`rollout_sdk.traingate.outbound`) judges addresses with it, and
``rollout-sdk test`` shows its ``--base-url`` with it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import unquote, unquote_plus

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def literal_address(host: str) -> IPAddress | None:
    """The IP address ``host`` spells in any form a resolver takes literally, or None.

    Besides dotted quads and IPv6 this covers the forms ``inet_aton`` accepts (``2130706433``,
    ``0x7f000001``, ``0177.0.0.1``, ``127.1``), which name the same address to ``getaddrinfo``.
    """
    host = host.removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host.lower()):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def normal_host(host: str) -> str:
    """A host as compared: lower case, percent-decoded, no brackets or trailing dot, and an IP
    address in its canonical form."""
    host = unquote(host).strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
    address = literal_address(host)
    return str(address) if address is not None else host


@dataclass(frozen=True)
class AllowedHost:
    """One allowlist entry: a host, and the one port it may be called on (None: any)."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, entry: str) -> AllowedHost:
        """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address; ValueError
        naming the entry when the port is not a number from 1 to 65535."""
        text = entry.strip()
        host, port = text, None
        if text.startswith("["):
            inside, _, rest = text[1:].partition("]")
            host, port = inside, rest.removeprefix(":") if rest.startswith(":") else None
            if rest and port is None:
                raise ValueError(f"allowed host {entry!r}: expected [address] or [address]:port")
        elif text.count(":") == 1:
            host, port = text.split(":")
        if port is None:
            return cls(normal_host(host))
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"allowed host {entry!r}: the port must be a number from 1 to 65535")
        return cls(normal_host(host), int(port))

    def admits(self, host: str, port: int) -> bool:
        return self.host == host and (self.port is None or self.port == port)


def parse_allowed_hosts(value: str) -> tuple[AllowedHost, ...]:
    """``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS``: comma-separated entries; empty allows any host."""
    return tuple(AllowedHost.parse(entry) for entry in value.split(",") if entry.strip())


# ---------------------------------------------------------------------------- URLs as shown

#: What a shown URL has in place of what it hides.
REDACTED = "***"
#: Query parameters whose values are shown: Azure OpenAI's API version, no credential.
SHOWN_QUERY_PARAMETERS = frozenset({"api-version", "api_version"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def _user_info_span(url: str) -> tuple[int, int] | None:
    """Where the user info of ``url`` starts and where its ``@`` is, or None.

    It is everything after ``scheme://`` (from the start without one) up to the last ``@``
    before the query or the fragment: ``user:password@``, ``KEY@``, ``:KEY@``, and a password
    holding a raw ``/`` or ``@`` too, which a URL parser would read as part of the path or the
    host: all of it is credentials, none of it is shown.
    """
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    ends = [i for i in (url.find("?", start), url.find("#", start)) if i >= 0]
    at = url.rfind("@", start, min(ends, default=len(url)))
    return None if at < 0 else (start, at)


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its user info, and that user info as written (None when it has none)."""
    span = _user_info_span(url)
    if span is None:
        return url, None
    start, at = span
    return url[:start] + url[at + 1 :], url[start:at]


def _query_and_fragment(url: str) -> tuple[str, str | None, str | None]:
    """``url`` before its query, the query (None without ``?``) and the fragment (None
    without ``#``)."""
    head, hash_, fragment = url.partition("#")
    head, mark, query = head.partition("?")
    return head, query if mark else None, fragment if hash_ else None


def _hidden(piece: str) -> bool:
    """Whether a query piece is hidden: a bare one (no ``=``: it may be a token), and the value
    of every parameter but api-version (an empty value hides nothing)."""
    name, eq, value = piece.partition("=")
    if not eq:
        return bool(piece)
    return bool(value) and unquote_plus(name).lower() not in SHOWN_QUERY_PARAMETERS


def redact_url(url: str) -> str:
    """``url`` as the kit shows it: its user info (any form, see :func:`_user_info_span`) as
    ``***@``, each query value but ``api-version``'s and a bare query piece as ``***``, and the
    fragment as ``***``.

    Any text is taken (nothing is parsed strictly, so that a malformed ``--base-url`` in an
    error message is shown this way too).
    """
    span = _user_info_span(url)
    shown = url if span is None else f"{url[: span[0]]}{REDACTED}{url[span[1] :]}"
    head, query, fragment = _query_and_fragment(shown)
    if query is not None:
        pieces = []
        for piece in query.split("&"):
            name, eq, _value = piece.partition("=")
            pieces.append((f"{name}={REDACTED}" if eq else REDACTED) if _hidden(piece) else piece)
        head += "?" + "&".join(pieces)
    if fragment is not None:
        head += f"#{REDACTED}"
    return head


#: A URL in free text (an error message): up to white space or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def user_info_secrets(user_info: str) -> list[str]:
    """The texts of ``user_info`` (as :func:`split_credentials` gives it) to cut from free text:
    all of it and its password (or, with none, its user), as written and percent-decoded."""
    user, colon, password = user_info.partition(":")
    return _written_and_decoded([user_info, password if colon else user])


def _written_and_decoded(found: list[str]) -> list[str]:
    texts = {text for raw in found for text in (raw, unquote(raw), unquote_plus(raw)) if text}
    return sorted(texts, key=lambda text: (-len(text), text))


def url_secrets(url: str) -> list[str]:
    """What :func:`redact_url` hides of ``url``, each as written and percent-decoded, longest
    first: the texts to cut from free text that may hold them (see :func:`redact_text`)."""
    bare, user_info = split_credentials(url)
    found = [] if user_info is None else user_info_secrets(user_info)
    _head, query, fragment = _query_and_fragment(bare)
    for piece in (query or "").split("&"):
        if _hidden(piece):
            found.append(piece.partition("=")[2] or piece)
    if fragment:
        found.append(fragment)
    return _written_and_decoded(found)


def redact_text(text: str, secrets: list[str]) -> str:
    """``text`` with every URL in it shown as :func:`redact_url` shows it, and each of
    ``secrets`` (longest first) cut: an error message that embeds a URL, or echoes a key."""
    text = _URL_IN_TEXT.sub(lambda match: redact_url(match.group()), text)
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
