"""What serving an MCP folder adds to a Lambda function: artifact size and cold-start time.

Builds the API function's artifact twice with the Makefile's own recipes (``make
build-DependenciesLayer`` and ``build-ApiFunction``, as `sam build` runs them), without and with
``MCP_FOLDER``, then compares:

- the bytes unzipped and zipped of the code plus its layer (what `sam deploy` uploads);
- ``import handler`` (which loads the agent loop named by ``AGENT_LOOP``, see
  rollout_sdk/aws/runtime.py) in fresh processes of the runtime's Python, interleaved, median
  of ``--runs``: the plain artifact with the calculator agent, the MCP artifact with the
  calculator agent (the bigger artifact alone), and the MCP artifact with
  ``AGENT_LOOP=mcp:FOLDER`` (FastMCP imported, the folder loaded, the tools listed);
- the MCP import's ``-X importtime`` self time by top-level package, heaviest first.

Usage: PYENV_VERSION=3.13.0 python -m bench.mcp_cost [--runs 7] [--folder examples/mcp_calculator]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from bench.package import lambda_env, runtime_boto3, tree_bytes, zipped_bytes
from testkit.artifact import DEPENDENCIES_LAYER, Artifact, make_artifact
from testkit.imports import ImportProbe, probe_import

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR = "examples.calculator.agent:agent_loop"


def build(target: Path, folder: str | None) -> Artifact:
    """The API function's code and its dependency layer in ``target`` by the Makefile's
    recipes (MCP_FOLDER reaches both: the layer's requirements and the code's check)."""
    return make_artifact(
        target, "ApiFunction", variables={"PYTHON": sys.executable, "MCP_FOLDER": folder or ""}
    )


def artifact_sizes(artifact: Artifact) -> tuple[int, int]:
    """The code plus its layers: bytes unzipped, and zipped (each zip as `sam deploy` makes it)."""
    folders = [artifact.code, *artifact.layers]
    return sum(tree_bytes(f) for f in folders), sum(zipped_bytes(f) for f in folders)


def cold_import(
    python: str, artifact: Artifact, boto3_dir: Path, agent: str, flags: tuple[str, ...] = ()
) -> ImportProbe:
    """``import handler`` in a fresh process of the artifact, serving ``agent``."""
    return probe_import(
        "import handler",
        python=python,
        flags=["-S", *flags],
        env={**lambda_env(artifact, boto3_dir), "AGENT_LOOP": agent},
        cwd=artifact.code,
        timeout=120,
    )


def self_time_by_package(stderr: str) -> dict[str, float]:
    """``-X importtime`` lines summed by top-level package: self time in milliseconds."""
    totals: dict[str, float] = defaultdict(float)
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        totals[name.split(".")[0]] += int(self_us) / 1000
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="python3.13")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--folder", default="examples/mcp_calculator")
    parser.add_argument("--work-dir", type=Path, default=ROOT / ".aws-sam" / "mcp-cost")
    parser.add_argument("--reuse", action="store_true", help="keep artifacts built before")
    args = parser.parse_args()
    work = args.work_dir.resolve()
    plain, with_mcp = work / "plain", work / "mcp"
    artifacts: dict[str, Artifact] = {}
    for name, target, folder in (("plain", plain, None), ("mcp", with_mcp, args.folder)):
        if args.reuse and target.exists():
            artifacts[name] = Artifact(
                "ApiFunction", target / "ApiFunction", (target / DEPENDENCIES_LAYER,)
            )
            continue
        shutil.rmtree(target, ignore_errors=True)
        artifacts[name] = build(target, folder)
    boto3_dir = runtime_boto3(args.python, work / "runtime-boto3")

    print(f"{'artifact':<10}{'unzipped MB':>13}{'zipped MB':>11}  (the code plus its layer)")
    sizes = {}
    for name, artifact in artifacts.items():
        sizes[name] = artifact_sizes(artifact)
        print(f"{name:<10}{sizes[name][0] / 1e6:>13.1f}{sizes[name][1] / 1e6:>11.1f}")
    added = (sizes["mcp"][0] - sizes["plain"][0], sizes["mcp"][1] - sizes["plain"][1])
    print(f"{'added':<10}{added[0] / 1e6:>13.1f}{added[1] / 1e6:>11.1f}")

    cases = {
        "plain artifact, calculator agent": (artifacts["plain"], CALCULATOR),
        "MCP artifact, calculator agent": (artifacts["mcp"], CALCULATOR),
        f"MCP artifact, mcp:{args.folder}": (artifacts["mcp"], f"mcp:{args.folder}"),
    }
    seconds: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.runs):  # interleaved, so drift in the machine's speed hits every case
        for label, (artifact, agent) in cases.items():
            probe = cold_import(args.python, artifact, boto3_dir, agent)
            if not probe.ok:
                print(f"{label}: import handler failed: {probe.error}", file=sys.stderr)
                return 1
            seconds[label].append(probe.seconds)
    print(f"\nimport handler, fresh processes, {args.runs} runs each (ms): median [min, max]")
    medians = {}
    for label, values in seconds.items():
        medians[label] = statistics.median(values) * 1000
        print(
            f"  {label:<44}{medians[label]:>7.0f}  [{min(values) * 1000:.0f}, "
            f"{max(values) * 1000:.0f}]"
        )
    base, mcp = medians["plain artifact, calculator agent"], medians[list(cases)[-1]]
    print(f"  the MCP path adds {mcp - base:.0f} ms ({mcp / base:.2f}x)")

    traced = cold_import(
        args.python, artifacts["mcp"], boto3_dir, f"mcp:{args.folder}", flags=("-X", "importtime")
    )
    plain_traced = cold_import(
        args.python, artifacts["plain"], boto3_dir, CALCULATOR, flags=("-X", "importtime")
    )
    kit = self_time_by_package(plain_traced.stderr)
    extra = {
        name: ms - kit.get(name, 0.0)
        for name, ms in self_time_by_package(traced.stderr).items()
        if ms - kit.get(name, 0.0) > 0
    }
    top = sorted(extra.items(), key=lambda item: -item[1])[:12]
    print(
        "\nimport self time the MCP path adds, by top-level package (-X importtime, one run, ms):"
    )
    print("  " + ", ".join(f"{name} {ms:.0f}" for name, ms in top))
    print(f"\n{time.strftime('%Y-%m-%d')}, {args.python}, {os.uname().machine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
