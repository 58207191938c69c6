"""Outside load driver: the real ``rollout-sdk serve`` as a subprocess, driven over loopback.

    python -m bench.load --rollouts 300 --concurrency 50 --store sqlite

The command line of :func:`testkit.load.run_load`: exit 0 only if every rollout was called back
exactly once, COMPLETED, with the right answer, within ``--deadline``.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from testkit.load import run_load
from testkit.processes import DEFAULT_AGENT, ServerStartError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load",
        description="Drive a real `rollout-sdk serve` subprocess over loopback with N rollouts, "
        "C in flight, and check every rollout is called back exactly once, COMPLETED.",
    )
    parser.add_argument("--rollouts", type=int, default=300, help="rollouts to run (default 300)")
    parser.add_argument("--concurrency", type=int, default=50, help="inits in flight (default 50)")
    parser.add_argument("--store", choices=("sqlite", "memory", "dynamodb"), default="sqlite")
    parser.add_argument(
        "--deadline",
        type=float,
        default=240.0,
        help="fail when the whole run takes longer, server start included (default 240 s)",
    )
    parser.add_argument(
        "--server-cmd",
        metavar="CMD",
        help="command that runs the rollout-sdk CLI, before its 'serve ...' arguments "
        "(default: the rollout-sdk script beside this Python)",
    )
    parser.add_argument("--agent", default=DEFAULT_AGENT, metavar="MODULE:ATTR")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run_load(
            rollouts=args.rollouts,
            concurrency=args.concurrency,
            store=args.store,
            deadline=args.deadline,
            server_cmd=shlex.split(args.server_cmd) if args.server_cmd else None,
            agent=args.agent,
        )
    except (ValueError, ServerStartError) as exc:
        print(f"bench.load: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench.load: interrupted", file=sys.stderr)
        return 130
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
