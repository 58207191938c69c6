"""The fault-injection matrix: every rollout reported once, none run twice, under faults.

    python -m bench.reliability                  # the full matrix (make reliability)
    python -m bench.reliability --scale fast --out /tmp/reliability.md

Every row drives the real thing over loopback: a ``rollout-sdk serve`` subprocess on its SQLite
store, or the Lambda handlers of ``handler.py`` on moto's server, against the TrainGate stand-in
(:mod:`rollout_sdk.testing.standin`, served by uvicorn on 127.0.0.1), which fails on command. The stand-in
logs every call and how it ended, so each row counts, rollout by rollout:

- lost: TrainGate never received a final response;
- duplicated: a final response sent again after one attempt got its 2xx back, two different final
  responses, or a second run of the agent (each run sends its own ``run_id`` with its chat calls,
  so a retried call is never mistaken for a second run);
- re-sent after a lost acknowledgement: TrainGate had the response but the kit never saw the 2xx.
  Allowed, if identical; counted apart.

Every row also checks its expected outcome (status, record state, attempts, Retry-After honoured,
nothing stored...). The full matrix writes ``docs/reliability.md`` and exits 1 when any row has a
lost or duplicated rollout or a wrong outcome. ``tests/reliability`` runs the same scenarios at the
``fast`` scale in ``make test``. The rigs and scenarios live in :mod:`testkit.rigs` and
:mod:`testkit.scenarios`, the table in :mod:`testkit.report`; this is their command line. Every
wait is bounded; every server and subprocess is stopped in a
``finally``; all traffic stays on 127.0.0.1; AWS is moto's server with fake credentials.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from testkit import REPO_ROOT
from testkit.report import run_report
from testkit.scenarios.base import SCALES

DEFAULT_OUT = REPO_ROOT / "docs" / "reliability.md"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reliability",
        description="Run the fault-injection matrix against the real local server and Lambda "
        "handlers on loopback; write the table; exit 1 if any rollout was lost or duplicated "
        "or any outcome was wrong.",
    )
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"markdown output (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--functions-log",
        type=Path,
        default=Path(os.devnull),
        metavar="FILE",
        help="where the emulated Lambda functions' log lines and metrics go (they write to "
        "stdout); default: discarded, so that only the report's lines show",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    scale = SCALES[args.scale]
    command = shlex.join(["python", "-m", "bench.reliability", *(argv or sys.argv[1:])])
    if os.environ.get("MAKELEVEL"):  # run by make
        command = f"make reliability ({command})"
    began = time.monotonic()
    # The functions run in this process (and its children) write to fd 1: send it to the
    # functions' log; the report's lines are on stderr.
    functions_log = args.functions_log.open("a", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(functions_log.fileno(), 1)

    def say(message: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {message}", file=sys.stderr, flush=True)

    say(f"reliability matrix, scale {scale.name} (deadline {scale.deadline:g} s)")
    try:
        return run_report(scale, out=args.out, command=command, say=say)
    except KeyboardInterrupt:
        print("bench.reliability: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
