"""What a durable rollout's replay costs: the CPU of an invocation that replays N recorded chat
turns and then makes one more, for N of 10, 50 and 200, through the testing SDK's runner.

    python -m bench.durable_replay [--turns 10,50,200] [--runs 3]

Each execution runs the kit's own journal (:class:`rollout_sdk.aws.durable.DurableJournal`, the
checkpoint serializer included) under an agent loop shaped as a real one: each turn sends the
whole conversation so far and appends the answer (of about 1 KB) and a user message. The first
invocation makes N turns and suspends (its deadline is set to fit exactly N); the second replays
those N from the record (no model call: each answer comes back from its checkpoint, and the
conversation it asked with is compared with the recorded one) and makes turn N + 1. The figure
is that second invocation's CPU time (the whole process's: the SDK's thread, the loop's and the
runner's in-memory checkpoint service), its one new turn included. Its growth is reported as the exponent of turns between each pair of sizes: 1 is
linear, 2 quadratic. The model's answer is made in process (no HTTP), so what is measured is
the replay itself.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import statistics
import sys
import time
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

from bench.common import report_and_exit
from rollout_sdk.aws.checkpoints import CheckpointSerDes
from rollout_sdk.aws.durable import DurableJournal, ExecutionBill
from rollout_sdk.cost.usage import Usage
from rollout_sdk.protocol import CompletionsResponse
from testkit.durable import close_runner

DEFAULT_TURNS = (10, 50, 200)
#: Simulated seconds a turn takes (the journal's clock).
TURN_SECONDS = 60.0
#: The answer's text: about a kilobyte, as a short completion.
ANSWER = "step " + "w" * 1000


def answer(turn: int) -> CompletionsResponse:
    return CompletionsResponse.model_validate(
        {
            "id": f"c-{turn}",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"{ANSWER} {turn}"},
                    "finish_reason": "stop",
                }
            ],
        }
    )


class Replay:
    """One execution of ``turns`` + 1 turns over two invocations; the CPU of each."""

    def __init__(self, turns: int, bill: ExecutionBill | None = None) -> None:
        self.turns = turns
        self.bill = bill
        #: The execution's own charges as the last invocation's journal reckons them.
        self.usage: Usage | None = None
        self.clock = 0.0
        self.invocations = 0
        self.cpu: list[float] = []
        self.loop = asyncio.new_event_loop()

    def _now(self) -> float:
        return self.clock

    def execution(self, event: Any, ctx: DurableContext) -> dict[str, Any]:
        first = self.invocations == 0
        self.invocations += 1
        started = time.process_time()
        # The first invocation fits exactly ``turns`` turns before its turn reserve (twice the
        # longest turn); the second has all the time it needs.
        ends = self.clock + (self.turns * TURN_SECONDS + 2 * TURN_SECONDS - 1 if first else 1e9)
        journal = DurableJournal(
            ctx,
            self.loop,
            clock=self._now,
            invocation_ends_at=ends,
            rollout_ends_at=1e12,
            deadline_seconds=1e12,
            hold_suspended=_nothing,
            serdes=CheckpointSerDes(rollout_id="bench", s3=_no_s3, bucket=None),
            bill=self.bill,
        )
        try:
            return self.loop.run_until_complete(self._agent(journal))
        finally:
            self.cpu.append(time.process_time() - started)
            self.usage = journal.execution_usage()

    async def _agent(self, journal: DurableJournal) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "begin"}]
        for turn in range(1, self.turns + 2):
            body = {"messages": messages, "rollout_id": "bench", "model": "default"}

            async def ask(turn: int = turn) -> CompletionsResponse:
                self.clock += TURN_SECONDS
                return answer(turn)

            reply, _ = await journal.chat(body, ask)
            messages = [
                *messages,
                dict(reply.choices[0].message),
                {"role": "user", "content": "go on"},
            ]
        return {"turns": self.turns + 1, "replayed": journal.replayed}


async def _nothing() -> None:
    return None


def _no_s3() -> Any:
    raise AssertionError("no result here is large enough for the bucket")


def run_execution(turns: int, bill: ExecutionBill | None = None) -> Replay:
    """One execution of ``turns`` + 1 turns over two invocations, run to its end."""
    replay = Replay(turns, bill)
    runner = DurableFunctionTestRunner(durable_execution(replay.execution), skip_time=True)
    try:
        result = runner.run(input="{}", execution_timeout=600, execution_name=f"replay-{turns}")
    finally:
        close_runner(runner)
        replay.loop.close()
    if result.result is None or replay.invocations != 2:
        raise RuntimeError(
            f"{turns} turns: {result.status} after {replay.invocations} invocations "
            f"(expected 2): {result.error}"
        )
    outcome = json.loads(result.result)
    if outcome["replayed"] < turns:
        raise RuntimeError(f"{turns} turns: only {outcome['replayed']} replayed")
    return replay


def replay_once(turns: int) -> dict[str, float]:
    """One execution of ``turns`` + 1 turns: the replaying invocation's CPU, in ms."""
    replay = run_execution(turns)
    return {"replay_ms": replay.cpu[1] * 1000, "first_ms": replay.cpu[0] * 1000}


def run_replay(sizes: tuple[int, ...], runs: int) -> dict[str, Any]:
    per: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    failures: list[str] = []
    for run in range(runs):
        for n in sizes:
            try:
                per[n].append(replay_once(n))
            except RuntimeError as exc:
                failures.append(str(exc))
            print(f"run {run + 1}/{runs}: {n} turns done", file=sys.stderr)
    cases: list[dict[str, Any]] = []
    for n in sizes:
        if not per[n]:
            continue
        replay = [r["replay_ms"] for r in per[n]]
        cases.append(
            {
                "turns": n,
                "replay_ms": replay,
                "replay_ms_median": statistics.median(replay),
                "per_turn_us": statistics.median(replay) * 1000 / n,
                "first_invocation_ms_median": statistics.median(r["first_ms"] for r in per[n]),
            }
        )
    growth = [
        {
            "from": a["turns"],
            "to": b["turns"],
            "exponent": math.log(b["replay_ms_median"] / a["replay_ms_median"])
            / math.log(b["turns"] / a["turns"]),
        }
        for a, b in itertools.pairwise(cases)
        if a["replay_ms_median"] > 0 and b["replay_ms_median"] > 0
    ]
    return {"runs": runs, "cases": cases, "growth": growth, "failures": failures}


def lines(report: dict[str, Any]) -> list[str]:
    """One line per size, one for the growth."""
    out = [
        f"durable replay, {c['turns']} turns: {c['replay_ms_median']:.1f} ms CPU "
        f"({c['per_turn_us']:.0f} µs a turn replayed; runs: "
        + ", ".join(f"{v:.1f}" for v in c["replay_ms"])
        + ")"
        for c in report.get("cases", [])
    ]
    if report.get("growth"):
        out.append(
            "durable replay growth (exponent of turns; 1 linear, 2 quadratic): "
            + ", ".join(f"{g['from']}->{g['to']}: {g['exponent']:.2f}" for g in report["growth"])
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.durable_replay", description=__doc__)
    parser.add_argument("--turns", default=",".join(map(str, DEFAULT_TURNS)))
    parser.add_argument("--runs", type=int, default=3, help="executions per size")
    args = parser.parse_args(argv)
    sizes = tuple(int(t) for t in args.turns.split(",") if t.strip())
    report = run_replay(sizes, args.runs)
    return report_and_exit(report, lines(report))


if __name__ == "__main__":
    sys.exit(main())
