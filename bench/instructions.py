"""Instructions the server executes per rollout, counted by valgrind's callgrind: a measure of a
lever's CPU work that this machine's drift does not move.

    python -m bench.instructions TREE [TREE ...] [--rounds 3] [--rollouts 300] [--stores memory,sqlite]
                                 [--baseline]

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

``--baseline`` also counts ``make bench``'s baseline, the bare aiohttp client making the same
exchanges (:func:`bench.throughput.run_baseline`, from this checkout), and prints each tree's
figure over it: the goal's ratio in instructions. The client is a process of its own that
imports and sets up before it starts, so it runs under callgrind whole, twice, with
:data:`BASELINE_SHORT` and then ``BASELINE_SHORT + --rollouts`` exchanges; the difference over
``--rollouts`` is its count per rollout, without its start-up. Both sides keep the same
:data:`CONCURRENCY` rollouts in flight.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import median
from bench.throughput import run_baseline
from bench.trees import Row, alternate, run_in_tree, tree_problem

#: A bound on one invocation (a round of two trees and two stores is about two minutes here).
MAX_ROUNDS = 15
WARMUP = 20
CONCURRENCY = 20
#: The baseline's shorter run (the longer one adds ``--rollouts`` exchanges to it).
BASELINE_SHORT = 60
#: The bare client ``make bench``'s CPU ratio divides by.
BASELINE_CLIENT = "aiohttp"

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


def run_round(tree: Path, rollouts: int, stores: list[str]) -> Row:
    """One run in ``tree``: each store's instructions per rollout."""
    args = [str(rollouts), str(WARMUP), str(CONCURRENCY), ",".join(stores)]
    return run_in_tree(tree, _CHILD, args, timeout=1800)


def _summary(out: Path) -> int:
    """The instructions a callgrind output file counted in all."""
    lines = [line for line in out.read_text().splitlines() if line.startswith("summary:")]
    return int(lines[0].split()[1])


def _baseline_instructions(exchanges: int) -> int:
    """The whole bare client's instructions for ``exchanges`` exchanges (all of them called
    back once, COMPLETED: else RuntimeError), under callgrind."""
    with tempfile.TemporaryDirectory(prefix="rollout-sdk-callgrind-") as out:
        output = Path(out, "callgrind.out")
        prefix = ["valgrind", "--tool=callgrind", "--dump-instr=no"]
        run = run_baseline(
            rollouts=exchanges,
            warmup=0,
            concurrency=CONCURRENCY,
            deadline=1800,
            client=BASELINE_CLIENT,
            prefix=[*prefix, f"--callgrind-out-file={output}"],
        )
        if run.failures:
            raise RuntimeError(f"the baseline client failed: {run.failures}")
        return _summary(output)


def baseline_per_rollout(rollouts: int) -> float:
    """The bare client's instructions per rollout, its start-up taken out (two runs' difference)."""
    short = _baseline_instructions(BASELINE_SHORT)
    long = _baseline_instructions(BASELINE_SHORT + rollouts)
    return (long - short) / rollouts


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
    parser.add_argument(
        "--baseline",
        action="store_true",
        help=f"also count the bare {BASELINE_CLIENT} client, and print each figure over it",
    )
    args = parser.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    problem = tree_problem("bench.instructions", args.trees, args.rounds, MAX_ROUNDS)
    absent = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if problem is None and absent:
        problem = f"bench.instructions: {' and '.join(absent)} not found: install valgrind"
    if problem:
        print(problem, file=sys.stderr)
        return 2
    seen = alternate(
        args.trees,
        args.rounds,
        lambda tree: run_round(tree, args.rollouts, stores),
        lambda row: ", ".join(f"{s} {row[s] / 1e6:.3f}" for s in stores),
    )
    print("medians (million instructions per rollout, the server's):")
    first = {s: median([r[s] for r in seen[args.trees[0]]]) for s in stores}
    for tree, rows in seen.items():
        figures = {s: median([r[s] for r in rows]) for s in stores}
        shown = ", ".join(
            f"{s} {figures[s] / 1e6:.3f} ({figures[s] / first[s]:.3f}x)" for s in stores
        )
        print(f"  {tree}: {shown}")
    if args.baseline:
        # Not alternated with the trees: a count does not drift with the machine.
        counts = []
        for number in range(1, args.rounds + 1):
            counts.append(baseline_per_rollout(args.rollouts))
            print(f"round {number} baseline_{BASELINE_CLIENT}: {counts[-1] / 1e6:.3f}", flush=True)
        base = median(counts)
        print(f"baseline_{BASELINE_CLIENT}: {base / 1e6:.3f} million instructions per rollout;")
        print("each tree's over it (the goal's ratio, counted in instructions):")
        for tree, rows in seen.items():
            ratios = ", ".join(f"{s} {median([r[s] for r in rows]) / base:.2f}x" for s in stores)
            print(f"  {tree}: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
