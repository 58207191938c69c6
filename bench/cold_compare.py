"""Variants of one cold start side by side: the API's first 202 and the worker's first chat
call over the bare import, in the lambda mode of :mod:`bench.aws` (files as shipped, read-only,
no bytecode written), the variants alternated within each round.

    python -m bench.cold_compare --rounds 11 \\
        --variant "neither:LAYER=/tmp/layer-with-v1/python,ROLLOUT_SDK_BOTOCORE_DATA=/nowhere" \\
        --variant "both:"

A variant is ``NAME:VAR=VALUE,...``: environment variables set on top of the function's (an
empty value list is the artifact as built). ``LAYER`` is not a variable: it replaces the
dependency layer's ``python/`` folder on the path (a copy of the layer with something put back,
say), so a lever of the layer's content is measured against the same code; ``CODE`` likewise
replaces the function's code folder (on the path, and the children's working folder): another
tree's code built as the Makefile's function_artifact builds it, say
``make build-ApiFunction ARTIFACTS_DIR=/tmp/code-before`` in that tree with
``PYENV_VERSION=3.13.0``, so a lever of the kit's code is measured against the same layer. How each cold-start
lever of docs/performance.md was measured before it was kept. One warm-up round is not
counted; each figure is the median of the rounds' ratios, with each child's CPU time (user and
system) beside.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench import aws


def parse_variant(spec: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=VALUE,...`` as (name, variables); ValueError naming what is wrong."""
    name, colon, rest = spec.partition(":")
    if not name or not colon:
        raise ValueError(f"--variant {spec!r}: write NAME:VAR=VALUE,... (NAME: for none)")
    variables: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, equals, value = item.partition("=")
        if not key or not equals:
            raise ValueError(f"--variant {spec!r}: {item!r} is not VAR=VALUE")
        variables[key] = value
    return name, variables


def compare(rounds: int, variants: dict[str, dict[str, str]]) -> dict[str, dict[str, list[float]]]:
    """Each variant's figures per round: bare import, API 202, worker first chat (ms from
    spawn), and each child's CPU ms."""
    from bench.package import runtime_boto3
    from bench.throughput import standin_thread
    from rollout_sdk.local.emulator import EmbeddedMoto, load_template

    python = aws.resolve_python("python3.13")
    if isinstance(python, str):
        raise SystemExit(python)
    built = aws.ensure_artifact(python)
    if "error" in built:
        raise SystemExit(built["error"])
    boto3_dir = runtime_boto3(python.executable, aws.BUILD_DIR.parent / "runtime-boto3")
    template = load_template(aws.TEMPLATE)
    keys = ("bare", "api", "worker", "bare_cpu", "api_cpu", "worker_cpu")
    figures: dict[str, dict[str, list[float]]] = {v: {k: [] for k in keys} for v in variants}
    with (
        EmbeddedMoto() as moto,
        standin_thread(aws.CALLBACK_KEY) as (standin, _, url),
        tempfile.TemporaryDirectory(prefix="rollout-sdk-cold-") as tmp,
    ):
        workdir = Path(tmp)
        artifact, boto3 = aws.mode_folders(aws.lambda_artifact(), boto3_dir, workdir)["lambda"]
        resources = aws.provision_stack(moto.endpoint_url, "bench-cold-compare")
        function_vars = aws.entry_variables(template, resources)
        site = str(artifact.layers[0] / "python")
        for i in range(rounds + 1):
            for name, variables in variants.items():
                extra = {k: v for k, v in variables.items() if k not in ("LAYER", "CODE")}
                code = Path(variables["CODE"]) if "CODE" in variables else artifact.code
                envs = {}
                for kind, base in function_vars.items():
                    env = {**aws.mode_env("lambda", base, artifact, boto3), **extra}
                    if "LAYER" in variables:
                        env["PYTHONPATH"] = env["PYTHONPATH"].replace(site, variables["LAYER"])
                    if "CODE" in variables:
                        env["PYTHONPATH"] = env["PYTHONPATH"].replace(
                            str(artifact.code), variables["CODE"]
                        )
                    envs[kind] = env
                bare, api, worker = aws.cold_round(
                    python.executable,
                    envs,
                    code,
                    workdir,
                    standin,
                    url,
                    f"cold-compare-{name}-{i}",
                )
                for out in (bare, api, worker):
                    if "error" in out:
                        raise SystemExit(f"{name} round {i}: {out['mode']}: {out['error']}")
                if "first_chat_ms" not in worker:
                    raise SystemExit(f"{name} round {i}: the worker made no chat call")
                if i == 0:  # warms the OS's file cache
                    continue
                row = figures[name]
                row["bare"].append(bare["imported_ms"])
                row["api"].append(api["first_202_ms"])
                row["worker"].append(worker["first_chat_ms"])
                for kind, out in (("bare", bare), ("api", api), ("worker", worker)):
                    row[f"{kind}_cpu"].append(out["cpu_ms"])
    return figures


def lines(figures: dict[str, dict[str, list[float]]]) -> list[str]:
    """The table: medians, and each function's ratio to the bare import (median of rounds)."""
    out = [
        f"{'variant':<14}{'bare':>7}{'API 202':>9}{'x bare':>8}{'1st chat':>10}{'x bare':>8}"
        f"   CPU ms bare/API/worker   (medians of {len(next(iter(figures.values()))['bare'])} "
        "rounds)"
    ]
    for name, row in figures.items():
        api = [a / b for a, b in zip(row["api"], row["bare"], strict=True)]
        worker = [w / b for w, b in zip(row["worker"], row["bare"], strict=True)]
        med = {k: statistics.median(v) for k, v in row.items()}
        out.append(
            f"{name:<14}{med['bare']:>7.0f}{med['api']:>9.0f}{statistics.median(api):>8.2f}"
            f"{med['worker']:>10.0f}{statistics.median(worker):>8.2f}   "
            f"{med['bare_cpu']:.0f}/{med['api_cpu']:.0f}/{med['worker_cpu']:.0f}"
            f"   API {min(api):.2f}-{max(api):.2f}, worker {min(worker):.2f}-{max(worker):.2f}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--variant", action="append", required=True, metavar="NAME:VAR=VALUE,...")
    args = parser.parse_args(argv)
    try:
        variants = dict(parse_variant(spec) for spec in args.variant)
    except ValueError as exc:
        parser.error(str(exc))
    for line in lines(compare(args.rounds, variants)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
