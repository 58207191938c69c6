"""`make package`: the size of each `sam build` artifact, and an import check with the runtime's
Python, with boto3 beside it as the Lambda runtime provides it (boto3 is not in the artifact).

Usage: python -m bench.package --build-dir .aws-sam/build --python python3.13
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from testkit.aws import FAKE_AWS

GOAL_BYTES = 15_000_000  # "at most 15 MB"
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]


def tree_bytes(path: Path) -> int:
    """Bytes of every file below ``path`` (what the zip holds before compression)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def biggest(path: Path, count: int = 8) -> list[tuple[str, int]]:
    """The largest top-level entries of an artifact."""
    sizes = [(p.name, tree_bytes(p) if p.is_dir() else p.stat().st_size) for p in path.iterdir()]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def runtime_boto3(python: str, cache: Path) -> Path:
    """boto3 for the runtime's Python, installed once into ``cache`` (the runtime provides it)."""
    marker = cache / ".installed"
    if not marker.exists():
        version = next(
            (
                line.strip().split("==")[1]
                for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line.startswith("boto3==")
            ),
            None,
        )
        spec = f"boto3=={version}" if version else "boto3"
        subprocess.run(  # noqa: S603 - a fixed argv list, no shell
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
                str(cache),
                spec,
            ],
            check=True,
            timeout=600,
        )
        marker.touch()
    return cache


def import_check(python: str, artifact: Path, boto3_dir: Path) -> tuple[bool, float, str]:
    """Import ``handler`` from the artifact alone (plus the runtime's boto3): a cold start."""
    env = {
        # Only what a Lambda environment has, plus what finds the runtime's Python here (pyenv).
        **{
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "HOME", "PYENV_VERSION", "PYENV_ROOT")
        },
        "PYTHONPATH": f"{artifact}{os.pathsep}{boto3_dir}",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",  # leave the artifact as built
        "AGENT_LOOP": "examples.calculator.agent:agent_loop",
        "TABLE_NAME": "rollouts",
        "WORKER_FUNCTION_NAME": "worker",
        **FAKE_AWS,
    }
    code = "import time; t = time.perf_counter(); import handler; print(time.perf_counter() - t)"
    done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
        [python, "-S", "-c", code],
        cwd=artifact,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        return False, 0.0, done.stderr.strip().splitlines()[-1] if done.stderr else "failed"
    return True, float(done.stdout.strip().splitlines()[-1]), ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=".aws-sam/build", type=Path)
    parser.add_argument("--python", default="python3.13")
    args = parser.parse_args()
    build_dir = args.build_dir.resolve()
    functions = sorted(p for p in build_dir.iterdir() if p.is_dir())
    if not functions:
        print(
            f"no artifacts under {args.build_dir}: run `make build-lambda` first", file=sys.stderr
        )
        return 1
    boto3_dir = runtime_boto3(args.python, build_dir.parent / "runtime-boto3")
    report: dict[str, object] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": args.python,
        "goal_bytes": GOAL_BYTES,
        "functions": {},
    }
    ok = True
    print(f"{'function':<24}{'bytes':>12}{'MiB':>8}  boto3  import  largest entries")
    for artifact in functions:
        size = tree_bytes(artifact)
        has_boto3 = (artifact / "boto3").exists() or (artifact / "botocore").exists()
        imported, seconds, error = import_check(args.python, artifact, boto3_dir)
        within = size <= GOAL_BYTES and not has_boto3 and imported
        ok &= within
        top = ", ".join(f"{name} {n / 1e6:.1f}" for name, n in biggest(artifact, 4))
        print(
            f"{artifact.name:<24}{size:>12,}{size / 2**20:>8.2f}  {'yes' if has_boto3 else 'no':<5}  "
            f"{f'{seconds:.2f}s' if imported else 'FAIL':<6}  {top}"
        )
        if error:
            print(f"  import failed: {error}", file=sys.stderr)
        report["functions"][artifact.name] = {  # type: ignore[index]
            "bytes": size,
            "contains_boto3": has_boto3,
            "import_ok": imported,
            "import_seconds": round(seconds, 3),
            "largest": biggest(artifact),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "package-latest.json").write_text(json.dumps(report, indent=2) + "\n")
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict}: goal at most {GOAL_BYTES:,} bytes per artifact, no boto3, imports cleanly")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
