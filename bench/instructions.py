"""Instructions the server executes per rollout, counted by valgrind's callgrind: a measure of a
lever's CPU work that this machine's drift does not move.

    python -m bench.instructions TREE [TREE ...] [--rounds 3] [--rollouts 300] [--stores memory,sqlite]

Each TREE is a checkout of the repository (``git worktree add --detach /tmp/old <commit>``), as
for :mod:`bench.compare`; each run is a fresh child in that tree which drives ``rollout-sdk serve``
through :func:`bench.throughput.run_kit`, the server started under ``valgrind --tool=callgrind``
with instrumentation off, switched on (``callgrind_control -i on``) for the loaded phase only and
dumped at its end, so start-up and shutdown are not counted. The figure is the dump's
instructions over the rollouts of that phase (the warm-up's included: they ran in it).

Why instructions: a CPU figure here moves by a third from one run to the next (the machine's
speed drifts within minutes, and so does the baseline's CPU that :mod:`bench.compare` divides
by), more than most levers; the count moves by well under 1% between runs of one tree. It is
not the goal's measure (``make bench``'s CPU ratio is): a lever can take instructions off and
cost the same time (cache misses, a system call). The server runs about 50 times slower under
callgrind, on its two cores alone, so keep ``--rollouts`` to a few hundred. Needs valgrind
(``valgrind`` and ``callgrind_control`` on ``PATH``); loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import child_env, median

#: A bound on one invocation (a round of two trees and two stores is about two minutes here).
MAX_ROUNDS = 15
WARMUP = 20
CONCURRENCY = 20

#: What one child runs in its tree: each store's run under callgrind; instructions to stdout.
_CHILD = """
import contextlib, json, pathlib, subprocess, sys, tempfile
import testkit.processes as processes
from bench.throughput import run_kit
rollouts, warmup, concurrency, stores = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                         sys.argv[4].split(","))
row = {"failures": []}
for store in stores:
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-callgrind-") as out:
        def under_callgrind(out=out):
            return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no",
                    f"--callgrind-out-file={out}/callgrind.%p", sys.executable, "-m", "rollout_sdk"]
        processes.default_server_cmd = under_callgrind

        @contextlib.contextmanager
        def counted(pid):
            control = lambda *args: subprocess.run(["callgrind_control", *args, str(pid)],
                                                   check=True, capture_output=True)
            control("-i", "on")
            yield
            control("-d")  # the loaded phase's dump: callgrind.<pid>.1
            control("-i", "off")

        run = run_kit(store, rollouts=rollouts, warmup=warmup, concurrency=concurrency,
                      deadline=900, attach=counted)
        dumps = list(pathlib.Path(out).glob("callgrind.*.1"))
        if len(dumps) != 1:
            raise SystemExit(f"expected one dump of the loaded phase, found {dumps}")
        summary = [line for line in dumps[0].read_text().splitlines() if line.startswith("summary:")]
        row[store] = int(summary[0].split()[1]) / (run.measured + warmup)
        row["failures"] += run.failures
print(json.dumps(row))
"""


def run_round(tree: Path, rollouts: int, stores: list[str]) -> dict[str, float]:
    """One run in ``tree``: each store's instructions per rollout."""
    done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
        [
            sys.executable,
            "-c",
            _CHILD,
            str(rollouts),
            str(WARMUP),
            str(CONCURRENCY),
            ",".join(stores),
        ],
        cwd=tree,
        env=child_env({"PYTHONPATH": str(tree)}),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: exited {done.returncode}: {done.stderr[-500:]}")
    raw: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    failures = raw.pop("failures", [])
    if failures:
        raise RuntimeError(f"{tree}: runs failed: {failures}")
    return {name: float(value) for name, value in raw.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.instructions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("trees", nargs="+", type=Path, help="checkouts of the repository")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=300, help="measured rollouts per run")
    parser.add_argument("--stores", default="memory,sqlite")
    args = parser.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    missing = [str(t) for t in args.trees if not (t / "rollout_sdk").is_dir()]
    if missing:
        print(f"bench.instructions: not a checkout: {', '.join(missing)}", file=sys.stderr)
        return 2
    if not 1 <= args.rounds <= MAX_ROUNDS:
        print(
            f"bench.instructions: --rounds {args.rounds}: give 1 to {MAX_ROUNDS}", file=sys.stderr
        )
        return 2
    absent = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if absent:
        print(
            f"bench.instructions: {' and '.join(absent)} not found: install valgrind",
            file=sys.stderr,
        )
        return 2
    seen: dict[Path, list[dict[str, float]]] = {tree: [] for tree in args.trees}
    for number in range(1, args.rounds + 1):
        for tree in args.trees:
            row = run_round(tree.resolve(), args.rollouts, stores)
            seen[tree].append(row)
            shown = ", ".join(f"{s} {row[s] / 1e6:.3f}" for s in stores)
            print(f"round {number} {os.path.basename(tree)}: {shown}", flush=True)
    print("medians (million instructions per rollout, the server's):")
    first = seen[args.trees[0]]
    for tree, rows in seen.items():
        shown = ", ".join(
            f"{s} {median([r[s] for r in rows]) / 1e6:.3f}"
            f" ({median([r[s] for r in rows]) / median([r[s] for r in first]):.3f}x)"
            for s in stores
        )
        print(f"  {tree}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
