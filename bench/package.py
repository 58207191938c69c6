"""`make package`: the size of each `sam build` artifact, and an import check with the runtime's
Python, with boto3 beside it as the Lambda runtime provides it (boto3 is not in the artifact).

A function's artifact is its own code plus the layers it carries (:mod:`testkit.artifact`): the
budget is theirs together, and the import checks run with the code and each layer's python/ on
the path in Lambda's order. The dependencies are in the one DependenciesLayer: a function whose
code folder holds anything but the kit's and the agent's code fails. Each function is checked as
each deploy set (:data:`DEPLOY_SETS`) has it: with HandOff=queue the queue's functions exist,
and with DurableWorker=true the durable worker exists and it, the API and the re-drive carry the
DurableSdkLayer too (the durable execution SDK with the boto3 and botocore it needs: the only
layer that may ship them, under its own goal, :data:`DURABLE_GOAL_BYTES`), where the import check
also finds the SDK and that layer's boto3.

Each artifact must hold only what runs on Lambda: no local tooling or test helpers
(:data:`LOCAL_ONLY`), and its process must load none of them, nor sqlite3, both after
``import handler`` and, for the API and worker functions, after one event of ``events/`` (with
AWS unreachable, so nothing leaves the machine). argparse and python-dotenv are reported apart:
pydantic-settings (the settings tree) imports both from its own modules, which the check
confirms in the same artifact; anything else loading them fails it.

Usage: python -m bench.package --build-dir .aws-sam/build --python python3.13
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from testkit.artifact import DURABLE_SDK_LAYER, Artifact, built_functions
from testkit.aws import FAKE_AWS
from testkit.imports import ImportProbe, probe_import

#: A function's code plus its layers, unzipped, with bytecode compiled by the runtime's Python
#: ("at most 25 MB"; the older 15 MB goal assumed no bytecode).
GOAL_BYTES = 25_000_000
#: A function that carries the DurableSdkLayer (DurableWorker=true): the goal above plus the
#: layer's own, 30 MB, for botocore (21 MB, its data whole but for documentation examples: an
#: agent's own clients may call any service), boto3 and the SDK; Lambda's own limit is 250 MB.
DURABLE_GOAL_BYTES = GOAL_BYTES + 30_000_000
#: A deploy that serves an osmosis-ai 0.3.8 workflow (the poll function exists only then; it is
#: checked with the workflow loaded, as it runs).
WORKFLOW = {
    "Workflow": "examples.osmosis03.workflow:AnswerWorkflow",
    "Grader": "examples.osmosis03.workflow:ContainsLabel",
}
#: The template parameters of each deploy set checked (the functions and layers it deploys).
DEPLOY_SETS: dict[str, dict[str, str]] = {
    "default": {},
    "HandOff=queue": {"HandOff": "queue"},
    "DurableWorker=true": {"DurableWorker": "true"},
    "Workflow": dict(WORKFLOW),
}
#: What a fresh process prints when it exits: how many modules it compiled from source (none,
#: when the artifact's bytecode is complete and valid for the runtime's Python).
COMPILED_MARK = "compiled-from-source:"
# Counts every module compiled from source in the process (SourceFileLoader.source_to_code is
# what get_code calls when no valid .pyc exists), and says so at exit.
_COUNT_COMPILES = f"""
import atexit as _atexit, importlib.machinery as _machinery, sys as _sys
_compiled = []
_source_to_code = _machinery.SourceFileLoader.source_to_code
def _counted(self, data, path, *args, **kwargs):
    _compiled.append(str(path))
    return _source_to_code(self, data, path, *args, **kwargs)
_machinery.SourceFileLoader.source_to_code = _counted
_atexit.register(lambda: _sys.stderr.write(
    {COMPILED_MARK!r} + " " + str(len(_compiled)) + " " + " ".join(_compiled[:5]) + "\\n"))
"""
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
#: Never shipped (the Makefile's function_artifact removes them), so never imported on Lambda.
LOCAL_ONLY = ("rollout_sdk/local", "rollout_sdk/testing", "rollout_sdk/__main__.py")
#: Modules no function's process may load.
FORBIDDEN_MODULES = ("rollout_sdk.local", "rollout_sdk.testing", "sqlite3")
#: Modules a function loads only because pydantic-settings imports them (checked, not assumed).
SETTINGS_MODULES = ("argparse", "dotenv")
#: One event per function that has one in events/, run after the import.
EVENTS = {"ApiFunction": ("api", "health.json"), "WorkerFunction": ("worker", "worker.json")}
# The event's call, in the artifact's process: a LambdaContext stand-in, and an error is fine
# (AWS is unreachable); what matters is what the call imported.
_CALL = """
import json, types, handler
context = types.SimpleNamespace(function_name="f", function_version="1", memory_limit_in_mb=1024,
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:f",
    aws_request_id="req-1", get_remaining_time_in_millis=lambda: 30000)
try:
    getattr(handler, {entry!r})(json.loads({event!r}), context)
except Exception:
    pass
"""


def zipped_bytes(path: Path) -> int:
    """A folder as a deflated zip (what `sam deploy` uploads of it), in bytes."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(path.rglob("*")):
            if file.is_file() and not file.is_symlink():
                archive.write(file, file.relative_to(path))
    return buffer.getbuffer().nbytes


def compiled_from_source(probe: ImportProbe) -> tuple[int, str]:
    """How many modules the probe's process compiled from source, and the first few."""
    for line in reversed(probe.stderr.splitlines()):
        if line.startswith(COMPILED_MARK):
            count, _, first = line.removeprefix(COMPILED_MARK).strip().partition(" ")
            return int(count), first
    return -1, "the process did not report (it failed before exiting?)"


def tree_bytes(path: Path) -> int:
    """Bytes of every file below ``path`` (what the zip holds before compression)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def biggest(path: Path, count: int = 8) -> list[tuple[str, int]]:
    """The largest top-level entries of an artifact."""
    sizes = [(p.name, tree_bytes(p) if p.is_dir() else p.stat().st_size) for p in path.iterdir()]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def deployed_artifacts(build_dir: Path) -> list[tuple[Artifact, list[str]]]:
    """Each distinct (function, layers) of every deploy set, with the sets that deploy it."""
    found: dict[tuple[str, tuple[Path, ...]], tuple[Artifact, list[str]]] = {}
    for label, parameters in DEPLOY_SETS.items():
        for artifact in built_functions(build_dir, parameters):
            entry = found.setdefault((artifact.name, artifact.layers), (artifact, []))
            entry[1].append(label)
    return list(found.values())


def is_durable(artifact: Artifact) -> bool:
    """Whether ``artifact`` carries the DurableSdkLayer."""
    return any(layer.name == DURABLE_SDK_LAYER for layer in artifact.layers)


def shipped_boto3(artifact: Artifact) -> bool:
    """Whether boto3 or botocore is in the code or a layer other than the DurableSdkLayer."""
    places = [artifact.code] + [
        layer / "python" for layer in artifact.layers if layer.name != DURABLE_SDK_LAYER
    ]
    return any((place / name).exists() for place in places for name in ("boto3", "botocore"))


def runtime_boto3(python: str, cache: Path) -> Path:
    """boto3 and botocore for the runtime's Python, at the versions constraints.txt pins (the
    kit's botocore data is built from that botocore: with another, its clients read botocore's
    whole data, and a cold start would measure that), installed once into ``cache`` and again
    when the pins change (the runtime provides them; no artifact ships them)."""
    pins = [
        line.strip()
        for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if line.startswith(("boto3==", "botocore=="))
    ]
    marker = cache / ".installed"
    if not marker.exists() or marker.read_text(encoding="utf-8").split() != pins:
        if cache.exists():
            shutil.rmtree(cache)
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
                *(pins or ["boto3"]),
            ],
            check=True,
            timeout=600,
        )
        marker.write_text("\n".join(pins) + "\n", encoding="utf-8")
    return cache


def lambda_env(artifact: Artifact, boto3_dir: Path) -> dict[str, str]:
    """What a Lambda environment has, plus what finds the runtime's Python here (pyenv); AWS at
    a closed loopback port, so a call fails at once instead of leaving the machine."""
    return {
        **{
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "HOME", "PYENV_VERSION", "PYENV_ROOT")
        },
        "PYTHONPATH": artifact.python_path(boto3_dir),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",  # leave the artifact as built
        "AGENT_LOOP": "examples.calculator.agent:agent_loop",
        "TABLE_NAME": "rollouts",
        "WORKER_FUNCTION_NAME": "worker",
        "ROLLOUT_SDK_BOTOCORE_DATA": artifact.at_opt("/opt/botocore-data"),
        **FAKE_AWS,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_MAX_ATTEMPTS": "1",
        # As template.yaml sets them with a Workflow.
        **(
            {
                **{name.upper(): value for name, value in WORKFLOW.items()},
                "ROLLOUT_SDK_OSMOSIS03_RESULT_WAIT_SECONDS": "20",
            }
            if artifact.name == "PollFunction"
            else {}
        ),
    }


def import_check(
    python: str, artifact: Artifact, boto3_dir: Path, statement: str, flags: Sequence[str] = ()
) -> ImportProbe:
    """Run ``statement`` with the artifact alone on the path (plus the runtime's boto3)."""
    return probe_import(
        _COUNT_COMPILES + statement,
        python=python,
        flags=["-S", *flags],
        env=lambda_env(artifact, boto3_dir),
        cwd=artifact.code,
        timeout=120,
    )


def shipped_local_files(artifact: Artifact) -> list[str]:
    """What of :data:`LOCAL_ONLY` the artifact (its code or a layer) holds."""
    return [name for name in LOCAL_ONLY if artifact.holds(name)]


def settings_imports(python: str, artifact: Artifact, boto3_dir: Path) -> dict[str, float]:
    """Each of :data:`SETTINGS_MODULES` that ``import pydantic_settings`` loads by itself in
    this artifact, with what it adds to ``import handler`` in ms (``-X importtime``'s
    cumulative figure where it is first imported; the median of 5 fresh processes)."""
    alone = import_check(python, artifact, boto3_dir, "import pydantic_settings")
    if not alone.ok:
        return {}
    wanted = [m for m in SETTINGS_MODULES if alone.loaded([m])]
    runs: dict[str, list[float]] = {m: [] for m in wanted}
    for _ in range(5):
        probe = import_check(python, artifact, boto3_dir, "import handler", ["-X", "importtime"])
        for line in probe.stderr.splitlines():
            fields = [f.strip() for f in line.removeprefix("import time:").split("|")]
            if len(fields) == 3 and fields[2] in runs:
                runs[fields[2]].append(int(fields[1]) / 1000)
    return {m: round(sorted(v)[len(v) // 2], 1) for m, v in runs.items() if v}


def check_modules(probe: ImportProbe, expected: dict[str, float]) -> tuple[list[str], list[str]]:
    """(forbidden modules loaded, settings modules loaded that pydantic-settings does not
    explain)."""
    forbidden = [name for name in FORBIDDEN_MODULES if probe.loaded([name])]
    unexplained = [m for m in SETTINGS_MODULES if probe.loaded([m]) and m not in expected]
    return forbidden, unexplained


def layer_sizes(artifacts: Sequence[Artifact]) -> dict[Path, tuple[int, int]]:
    """Each layer any function carries: (bytes unzipped, bytes zipped), measured once."""
    layers = {layer for artifact in artifacts for layer in artifact.layers}
    return {layer: (tree_bytes(layer), zipped_bytes(layer)) for layer in sorted(layers)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=".aws-sam/build", type=Path)
    parser.add_argument("--python", default="python3.13")
    args = parser.parse_args()
    build_dir = args.build_dir.resolve()
    deployed = deployed_artifacts(build_dir)
    artifacts = [artifact for artifact, _ in deployed]
    if not artifacts:
        print(
            f"no artifacts under {args.build_dir} (or no template.yaml there): run "
            "`make build-lambda` first",
            file=sys.stderr,
        )
        return 1
    boto3_dir = runtime_boto3(args.python, build_dir.parent / "runtime-boto3")
    layers = layer_sizes(artifacts)
    report: dict[str, object] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": args.python,
        "goal_bytes": GOAL_BYTES,
        "durable_goal_bytes": DURABLE_GOAL_BYTES,
        "deploy_sets": DEPLOY_SETS,
        "layers": {
            layer.name: {"bytes": size, "zipped_bytes": zipped, "largest": biggest(layer)}
            for layer, (size, zipped) in layers.items()
        },
        "functions": {},
    }
    ok = True
    notes: list[str] = []
    settings_ms: dict[str, float] | None = None
    for layer, (size, zipped) in layers.items():
        top = ", ".join(f"{name} {n / 1e6:.1f}" for name, n in biggest(layer / "python", 4))
        print(
            f"layer {layer.name}: {size:,} bytes ({size / 2**20:.2f} MiB, zipped "
            f"{zipped / 2**20:.2f} MiB), built and uploaded once; {top}"
        )
    print(
        f"{'function':<44}{'code':>11}{'+ layers':>12}{'MiB':>8}{'zip MiB':>8}  src  boto3  "
        "import  largest entries of its code"
    )
    for artifact, sets in deployed:
        durable = is_durable(artifact)
        row = artifact.name + (f" ({', '.join(sets)})" if sets != list(DEPLOY_SETS) else "")
        goal = DURABLE_GOAL_BYTES if durable else GOAL_BYTES
        code_size = tree_bytes(artifact.code)
        size = code_size + sum(layers[layer][0] for layer in artifact.layers)
        zipped = zipped_bytes(artifact.code) + sum(layers[layer][1] for layer in artifact.layers)
        has_boto3 = shipped_boto3(artifact)
        shipped = shipped_local_files(artifact)
        foreign = artifact.foreign_code_entries()
        if settings_ms is None:  # the same dependencies in every artifact: measured once
            settings_ms = settings_imports(args.python, artifact, boto3_dir)
        probes = {
            "import handler": import_check(args.python, artifact, boto3_dir, "import handler")
        }
        if durable:
            # The durable worker's own entry imports the SDK at its cold start, and boto3 must be
            # the layer's, not the runtime's (the check also refuses one older than it needs).
            layer_site = next(p for p in artifact.path_entries if DURABLE_SDK_LAYER in str(p))
            probes["the durable SDK and the layer's boto3"] = import_check(
                args.python,
                artifact,
                boto3_dir,
                "import os; os.environ['_HANDLER'] = 'handler.durable_worker'\n"
                "import handler, boto3, aws_durable_execution_sdk_python\n"
                "import rollout_sdk.aws.handlers.durable\n"
                f"assert boto3.__file__.startswith({str(layer_site)!r}), boto3.__file__",
            )
        if artifact.name in EVENTS:
            entry, event_file = EVENTS[artifact.name]
            event = (ROOT / "events" / event_file).read_text(encoding="utf-8")
            probes[f"handler.{entry}(events/{event_file})"] = import_check(
                args.python, artifact, boto3_dir, _CALL.format(entry=entry, event=event)
            )
        imported = probes["import handler"]
        compiled, first_compiled = compiled_from_source(imported)
        if compiled != 0:
            notes.append(
                f"{artifact.name}: import handler compiled {compiled} modules from source "
                f"({first_compiled}): the artifact's bytecode is missing or not the runtime's"
            )
        forbidden: dict[str, list[str]] = {}
        unexplained: dict[str, list[str]] = {}
        for label, probe in probes.items():
            if not probe.ok:
                notes.append(f"{artifact.name}: {label} failed: {probe.error}")
                continue
            bad, odd = check_modules(probe, settings_ms)
            if bad:
                forbidden[label] = bad
                notes.append(f"{artifact.name}: after {label}, loaded {', '.join(bad)}")
            if odd:
                unexplained[label] = odd
                notes.append(
                    f"{artifact.name}: after {label}, loaded {', '.join(odd)}, which "
                    "pydantic-settings alone does not load here: find what imports it"
                )
        if shipped:
            notes.append(f"{artifact.name}: ships {', '.join(shipped)}")
        if foreign:
            notes.append(
                f"{artifact.name}: its code folder holds {', '.join(foreign)}, which belong in "
                "the dependency layer (one copy for every function)"
            )
        if not artifact.layers:
            notes.append(f"{artifact.name}: carries no layer: where are its dependencies?")
        within = (
            size <= goal
            and compiled == 0
            and not has_boto3
            and all(probe.ok for probe in probes.values())
            and not shipped
            and not foreign
            and bool(artifact.layers)
            and not forbidden
            and not unexplained
        )
        ok &= within
        top = ", ".join(f"{name} {n / 1e6:.2f}" for name, n in biggest(artifact.code, 3))
        print(
            f"{row:<44}{code_size:>11,}{size:>12,}{size / 2**20:>8.2f}"
            f"{zipped / 2**20:>8.2f}  {compiled:>3}  {'yes' if has_boto3 else 'no':<5}  "
            f"{f'{imported.seconds:.2f}s' if imported.ok else 'FAIL':<6}  {top}"
        )
        report["functions"][row] = {  # type: ignore[index]
            "deploy_sets": sets,
            "goal_bytes": goal,
            "code_bytes": code_size,
            "bytes": size,
            "zipped_bytes": zipped,
            "layers": [layer.name for layer in artifact.layers],
            "compiled_from_source": compiled,
            "contains_boto3": has_boto3,
            "import_ok": imported.ok,
            "import_seconds": round(imported.seconds, 3),
            "largest": biggest(artifact.code),
            "ships_local_only": shipped,
            "foreign_code_entries": foreign,
            "checked_after": list(probes),
            "forbidden_modules_loaded": forbidden,
            "settings_modules_unexplained": unexplained,
        }
    for note in notes:
        print(f"  FAIL {note}", file=sys.stderr)
    report["settings_modules_ms"] = settings_ms
    print(
        "checks, in every function: that it ships none of "
        + ", ".join(LOCAL_ONLY)
        + ", and loads none of "
        + ", ".join(FORBIDDEN_MODULES)
        + " after import handler (and after one event, for "
        + ", ".join(EVENTS)
        + ")"
    )
    for module, ms in (settings_ms or {}).items():
        print(
            f"known: {module} is loaded (+{ms:g} ms of import handler) because pydantic-settings, "
            "which reads the settings tree, imports it at module level (verified in this artifact)"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "package-latest.json").write_text(json.dumps(report, indent=2) + "\n")
    verdict = "PASS" if ok else "FAIL"
    print(
        f"{verdict}: goal at most {GOAL_BYTES:,} bytes per function unzipped (its code plus its "
        f"layers; {DURABLE_GOAL_BYTES:,} with the DurableSdkLayer), the dependencies in the "
        "layers alone, no module compiled from source at import (src), no boto3 outside the "
        "DurableSdkLayer, imports cleanly, no local tooling shipped or loaded, no sqlite3"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
