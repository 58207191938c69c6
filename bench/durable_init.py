"""What DurableWorker=true adds to a worker's cold start: the durable worker's init against the
plain worker's, from the artifacts `sam build` made, in interleaved fresh processes.

    python -m bench.durable_init --build-dir .aws-sam/build --python python3.13 [--rounds 7]

Each round runs, in a random-free fixed alternation, one fresh process (``-S``, the function's
code then its layers' python/ then the runtime's boto3 on the path, as
:func:`bench.package.lambda_env` gives it, AWS at a closed port) per function, timing in the
process what its first invocation needs before any request leaves:

- ``worker``: ``WorkerFunction`` (the DependenciesLayer, the runtime's boto3): ``import handler``
  with ``_HANDLER=handler.worker`` (the worker's module imported at once, as on Lambda), then
  its first client, DynamoDB's (the claim);
- ``durable``: ``DurableWorkerFunction`` as DurableWorker=true deploys it (that layer and the
  DurableSdkLayer, whose boto3 it runs): ``import handler`` with
  ``_HANDLER=handler.durable_worker`` (which imports the durable execution SDK and checks its
  boto3), then the Lambda client the SDK checkpoints with and DynamoDB's.

The files are read as built (``PYTHONDONTWRITEBYTECODE=1``, every module's bytecode shipped).
The first round warms the OS's file cache and is not counted. It prints each round, the medians,
the spread, and the durable worker's median over the worker's; one ``BENCH-RESULT`` JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.package import import_check, runtime_boto3
from testkit.artifact import Artifact, built_functions

#: The statement each process times: its init, then the clients its first invocation makes.
STATEMENTS = {
    "worker": (
        "WorkerFunction",
        {},
        "import os; os.environ['_HANDLER'] = 'handler.worker'\n"
        "import handler\n"
        "handler.runtime.clients.dynamodb\n",
    ),
    "durable": (
        "DurableWorkerFunction",
        {"DurableWorker": "true"},
        "import os; os.environ['_HANDLER'] = 'handler.durable_worker'\n"
        "import handler\n"
        "handler.runtime.clients.lambda_\n"
        "handler.runtime.clients.dynamodb\n",
    ),
}


def artifact_for(build_dir: Path, name: str, parameters: dict[str, str]) -> Artifact:
    for artifact in built_functions(build_dir, parameters):
        if artifact.name == name:
            return artifact
    raise SystemExit(f"{name} is not under {build_dir}: run `make build-lambda` first")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.durable_init", description=__doc__)
    parser.add_argument("--build-dir", default=".aws-sam/build", type=Path)
    parser.add_argument("--python", default="python3.13")
    parser.add_argument("--rounds", type=int, default=7, help="counted rounds (after one warm-up)")
    args = parser.parse_args(argv)
    build_dir = args.build_dir.resolve()
    boto3_dir = runtime_boto3(args.python, build_dir.parent / "runtime-boto3")
    artifacts = {
        kind: artifact_for(build_dir, name, parameters)
        for kind, (name, parameters, _) in STATEMENTS.items()
    }
    times: dict[str, list[float]] = {kind: [] for kind in STATEMENTS}
    order = list(STATEMENTS)
    for i in range(args.rounds + 1):
        line = []
        for kind in order[i % 2 :] + order[: i % 2]:
            probe = import_check(args.python, artifacts[kind], boto3_dir, STATEMENTS[kind][2])
            if not probe.ok:
                print(f"{kind} failed: {probe.error}", file=sys.stderr)
                return 1
            line.append(f"{kind} {probe.seconds * 1000:.0f} ms")
            if i:
                times[kind].append(probe.seconds * 1000)
        print(f"round {i}{' (warm-up)' if i == 0 else ''}: " + ", ".join(line), file=sys.stderr)
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    ratios = [d / w for d, w in zip(times["durable"], times["worker"], strict=True)]
    for kind, values in times.items():
        print(
            f"{kind}: median {medians[kind]:.0f} ms (spread {min(values):.0f} to "
            f"{max(values):.0f} ms, {len(values)} rounds)",
            file=sys.stderr,
        )
    print(
        f"durable / worker: {medians['durable'] / medians['worker']:.2f}x of the medians; "
        f"per round {min(ratios):.2f}x to {max(ratios):.2f}x "
        f"(+{medians['durable'] - medians['worker']:.0f} ms)",
        file=sys.stderr,
    )
    result = {
        "rounds": args.rounds,
        "python": args.python,
        "ms": times,
        "median_ms": medians,
        "ratio_of_medians": medians["durable"] / medians["worker"],
        "ratios": ratios,
    }
    print("BENCH-RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
