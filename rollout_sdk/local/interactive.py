"""``rollout-sdk test --interactive``: pause at each chat call, as v1's interactive mode did.

After the endpoint answers a chat call, the answer is shown (its text, its tool calls with their
arguments, its finish reason) and a command is read from standard input:

- ``n``, ``next`` or an empty line: go on to the next chat call;
- ``c``, ``continue``: run this row to its end without pausing;
- ``m``, ``messages``: show the whole conversation so far;
- ``t``, ``tools``: show the tools sent to the model;
- ``q``, ``quit``, ``exit`` (or the end of the input): abort this row.

Tool results the agent appended are shown before the next call goes out. Between rows a row
number is read (``q`` or the end of the input ends the session). Reading happens on a thread, so
the server the pause happens in keeps serving.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TextIO

COMMANDS = "[n]ext, [c]ontinue, [m]essages, [t]ools, [q]uit"
_HELP = {
    "n/next/Enter": "go on to the next chat call",
    "c/continue": "run this row to its end without pausing",
    "m/messages": "show the conversation so far",
    "t/tools": "show the tools sent to the model",
    "q/quit": "abort this row",
}


def _arguments(raw: Any) -> str:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return str(raw)
    return json.dumps(parsed, ensure_ascii=False)


class InteractiveSession:
    """The pauses of an interactive run: an :class:`~rollout_sdk.local.forward.Interactor`
    for the local TrainGate, plus what the runner shows between rows."""

    def __init__(self, *, stdin: TextIO, stdout: TextIO) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self._auto = False
        self._turn = 0
        self._seen = 0
        self._messages: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []

    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def read(self, prompt: str = "> ") -> str | None:
        """One line of input, stripped and lower-cased; None at the end of the input."""
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            self.say()
            return None
        return line.strip().lower()

    def _message(self, message: dict[str, Any], index: int | None = None) -> None:
        role = str(message.get("role", "?"))
        label = f"[{index}] " if index is not None else ""
        if role == "tool":
            role = f"tool {message.get('tool_call_id', '')}".rstrip()
        content = message.get("content")
        self.say(f"{label}{role}: {'' if content is None else content}")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            self.say(
                f"    tool call {call.get('id', '?')}: {function.get('name', '?')}"
                f"({_arguments(function.get('arguments', '{}'))})"
            )

    def _show_tools(self) -> None:
        self.say("--- tools ---")
        if not self._tools:
            self.say("(none)")
        for tool in self._tools:
            function = tool.get("function") or {}
            params = list((function.get("parameters") or {}).get("properties") or {})
            self.say(
                f"  {function.get('name')}({', '.join(params)}): {function.get('description', '')}"
            )

    def _show_messages(self) -> None:
        self.say("--- messages ---")
        for index, message in enumerate(self._messages):
            self._message(message, index)

    # ------------------------------------------------------------------ the runner's side

    def start_row(self, row_index: int, messages: list[dict[str, Any]]) -> None:
        """Begin a row: show its initial conversation."""
        self._auto, self._turn = False, 0
        self._messages = list(messages)
        self._seen = len(messages)
        self._tools = []
        self.say(f"=== row {row_index} ===")
        for message in messages:
            self._message(message)

    def end_row(self, lines: list[str]) -> None:
        """Show how the row ended."""
        self.say("--- result ---")
        for line in lines:
            self.say(line)

    def choose_row(self, first: int, last: int) -> int | None:
        """Read a row number between ``first`` and ``last``; None to end the session."""
        while True:
            self.say(f"Select a row to test [{first}-{last}] or 'q' to quit:")
            answer = self.read()
            if answer is None or answer in ("q", "quit", "exit"):
                return None
            try:
                row = int(answer)
            except ValueError:
                self.say("Please enter a row number or 'q' to quit.")
                continue
            if first <= row <= last:
                return row
            self.say(f"Invalid row index {row}. Valid range: {first}-{last}")

    # ------------------------------------------------------------------ Interactor

    async def before(
        self, rollout_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> None:
        if not self._tools and tools:
            self._tools = tools
            if self._turn == 0:
                self._show_tools()
        for message in messages[self._seen :]:
            if message.get("role") == "tool":
                self._message(message)
        self._messages = list(messages)
        self._seen = len(messages)

    async def after(self, rollout_id: str, answer: dict[str, Any]) -> bool:
        self._turn += 1
        choice = (answer.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        self.say(f"--- turn {self._turn}: model answer ---")
        self._message(message)
        if choice.get("finish_reason"):
            self.say(f"finish reason: {choice['finish_reason']}")
        self._messages = [*self._messages, message]
        if self._auto:
            return True
        while True:
            self.say(f"Commands: {COMMANDS}")
            command = await asyncio.to_thread(self.read)
            if command is None or command in ("q", "quit", "exit"):
                self.say("aborting this row")
                return False
            if command in ("", "n", "next"):
                return True
            if command in ("c", "continue"):
                self._auto = True
                return True
            if command in ("m", "messages"):
                self._show_messages()
            elif command in ("t", "tools"):
                self._show_tools()
            else:
                self.say(f"unknown command {command!r}")
                for name, what in _HELP.items():
                    self.say(f"  {name:<14}{what}")
