"""JSON text measured without parsing it: how many values it holds and how deep it nests.

The text is reduced to its *skeleton*: every string (object keys too) becomes ``0`` and
whitespace goes, leaving numbers, literals and the structural characters, which
``bytes.count`` counts. All of it runs in C (byte methods, ``split``, ``accumulate``), a bounded
slice at a time, so a 6 MiB body is measured in tens of milliseconds and a few MiB, where
parsing it could build millions of objects.

For valid JSON the figures are exact. Text that is not JSON is measured without complaint (an
unterminated string runs to the end) and its figures mean little: whatever parses it
afterwards answers for it.
"""

from __future__ import annotations

from itertools import accumulate

#: Bytes of text stripped at a time: bounds the pieces ``split`` holds at once.
_SLICE = 64 * 1024
_WHITESPACE = b" \t\r\n"
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes
_ALL_BUT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def _without_escapes(text: bytes) -> bytes:
    """``text`` without escaped backslashes, then without escaped quotes: what is left of each
    string holds no quote, so quotes alternate opening and closing (JSON has backslashes only
    inside strings, and reads escapes left to right, as ``replace`` removes them)."""
    return text.replace(b"\\\\", b"").replace(b'\\"', b"")


def _strings_as_zero(text: bytes) -> bytes:
    """Each string of ``text`` (escapes removed) replaced by ``0``, a slice at a time; every
    slice ends outside a string, found by the parity of the quotes before its end."""
    parts = []
    start, end = 0, len(text)
    while start < end:
        cut = min(start + _SLICE, end)
        if text.count(b'"', start, cut) % 2:  # inside a string: end the slice after it
            closing = text.find(b'"', cut)
            cut = end if closing < 0 else closing + 1
        # Outside and inside pieces alternate; the outside ones, a 0 where each string was.
        parts.append(b"0".join(text[start:cut].split(b'"')[::2]))
        start = cut
    return b"".join(parts)


class Skeleton:
    """The structure of one JSON text; its strings are stripped once, at construction."""

    def __init__(self, text: bytes) -> None:
        self._text = _strings_as_zero(_without_escapes(text)).translate(None, _WHITESPACE)

    def values(self) -> int:
        """How many values the text holds, containers included, and each object key counted
        as one more: what parsing it would build, at most one object for each.

        Every value or key but the outermost value follows exactly one of: a comma, a colon,
        or the bracket that opens a non-empty container.
        """
        text = self._text
        if not text:
            return 0
        opened = text.count(b"[") + text.count(b"{")
        empty = text.count(b"[]") + text.count(b"{}")
        return 1 + text.count(b",") + text.count(b":") + opened - empty

    def depth(self) -> int:
        """How many levels arrays and objects nest: 0 for a scalar, 1 for ``[]`` or
        ``{"a": 1}``, 2 for ``[[]]``: the highest running count of open brackets."""
        steps = self._text.translate(_STEPS, _ALL_BUT_BRACKETS)
        if not steps:
            return 0
        highest = max(accumulate(memoryview(steps).cast("b")))
        return max(highest, 0)
