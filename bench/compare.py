"""Two or more trees of the kit side by side: the server's CPU per rollout over the bare aiohttp
client's, round by round, the trees alternated within each round.

    python -m bench.compare TREE [TREE ...] [--rounds 3] [--rollouts 500] [--stores memory,sqlite]

Each TREE is a checkout of the repository (``git worktree add --detach /tmp/old <commit>``);
every run is a fresh process of that tree (``PYTHONPATH=TREE python -m bench.throughput`` runs
the kit and the baseline exactly as ``make bench`` does), so a round measures the trees one
after the other on the same machine minutes apart, and the ratio (each run's server CPU over
the baseline run just before it, in the same child) cancels most of the machine's drift. How
each lever of docs/performance.md was measured before it landed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import median
from bench.trees import Row, alternate, run_in_tree, tree_problem

#: A bound on one invocation (a round of two trees is about a minute here).
MAX_ROUNDS = 30

#: What one child runs in its tree: a baseline_aiohttp run, then each store; ratios to stdout.
_CHILD = """
import json, sys
from bench.throughput import run_baseline, run_kit
rollouts, stores = int(sys.argv[1]), sys.argv[2].split(",")
base = run_baseline(rollouts=rollouts, warmup=50, concurrency=50, deadline=300, client="aiohttp")
row = {"baseline_ms": base.cpu_ms_per_rollout, "failures": list(base.failures)}
for store in stores:
    run = run_kit(store, rollouts=rollouts, warmup=50, concurrency=50, deadline=300)
    row[store] = run.cpu_ms_per_rollout / base.cpu_ms_per_rollout
    row["failures"] += run.failures
print(json.dumps(row))
"""


def run_round(tree: Path, rollouts: int, stores: list[str]) -> Row:
    """One round in ``tree``: each store's ratio, and the baseline's CPU ms per rollout."""
    return run_in_tree(tree, _CHILD, [str(rollouts), ",".join(stores)], timeout=900)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("trees", nargs="+", type=Path, help="checkouts of the repository")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=500, help="measured rollouts per run")
    parser.add_argument("--stores", default="memory,sqlite")
    args = parser.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    problem = tree_problem("bench.compare", args.trees, args.rounds, MAX_ROUNDS)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    seen = alternate(
        args.trees,
        args.rounds,
        lambda tree: run_round(tree, args.rollouts, stores),
        lambda row: (
            ", ".join(f"{s} {row[s]:.2f}" for s in stores)
            + f" (baseline {row['baseline_ms']:.2f} ms)"
        ),
    )
    print("medians (server CPU per rollout / baseline_aiohttp's):")
    for tree, rows in seen.items():
        shown = ", ".join(f"{s} {median([r[s] for r in rows]):.2f}" for s in stores)
        print(f"  {tree}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
