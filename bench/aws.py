"""The AWS path's figures, against moto's server on 127.0.0.1 (nothing here reaches AWS).

    python -m bench.aws requests --runs 3     AWS requests per rollout on the happy path
    python -m bench.aws coldstart --python python3.13 --runs 5 [--no-build]
                                              cold start of handler.api and handler.worker

``requests``: ``handler.py`` imported in this process against an embedded, provisioned moto; one
init through ``handler.api``, the worker run it dispatched through ``handler.worker``, one
callback to a stand-in; every request of the runtime's boto3 clients is counted with botocore's
``before-call`` hooks (API calls) and ``before-send`` hooks (HTTP attempts, retries included),
by phase, service and operation. The first rollout of an environment also reads the server key
(cached afterwards): it is reported apart, as ``first``; the figure is the median of the next.

``coldstart``: on the Lambda runtime's Python (``--python``; a pyenv version of that name is
found without PYENV_VERSION, and the real interpreter is run, not pyenv's shim) with the
artifact of ``.aws-sam/build/ApiFunction`` (every function's code is the same folder) and the
dependency layer every function carries, ``.aws-sam/build/DependenciesLayer``
(:mod:`testkit.artifact`). They are reused when fresh, else built with the Makefile's own recipes
(``make build-DependenciesLayer`` and ``build-ApiFunction`` with ``ARTIFACTS_DIR=...``, what
``sam build`` runs, without SAM, about a quarter of a minute; ``--no-build`` reports it as not
measured instead): stale when the code lacks handler.py or its bytecode for that Python, the
layer its python/ folder or bytecode, or when any file of handler.py, rollout_sdk/, examples/,
the Makefile, constraints.txt or the requirements files was modified after the older of the
two builds. boto3 and botocore are the runtime's, not the artifact's: those of
constraints.txt, installed once with ``pip --target`` by that Python into
``.aws-sam/runtime-boto3`` (compiled, as the runtime image has them).

This process provisions moto (its own process, from the dev venv) and runs the TrainGate
stand-in; each measurement is a fresh ``python3.13 -S -P bench/coldchild.py`` process with
only the artifact (its code as /var/task, then the layer's python/ as /opt/python) and the
runtime's boto3 on ``PYTHONPATH``, its cwd the code, timed from just before it is spawned: a bare import of fastapi, mangum, boto3 and
aws_lambda_powertools; ``handler.api`` to its first 202; and ``handler.worker`` to its first
claim (its first DynamoDB write), its first chat call (stamped by the stand-in when the request
arrives) and the end of the rollout. Each round runs the three of them in each mode of
:data:`COLD_MODES` on a copy of the artifact: (a) ``warm``, with its bytecode and a writable
cache; (b) ``lambda``, the files as shipped, read-only and ``PYTHONDONTWRITEBYTECODE=1``
(root ignores permissions, so the variable is what keeps the cache unwritten); (c)
``source``, the artifact and the runtime's boto3 without any ``__pycache__`` and with that
variable, every module but the standard library's compiled from source, as before the artifact
shipped bytecode (it shipped botocore then, without bytecode). Each child counts the modules
it compiled from source, and its CPU time (user and system, from ``getrusage``) is reported
beside: other work on the machine disturbs it less than the wall-clock figures, which the goals
are judged on. One warm-up round is not counted. The figures are each function's
ratio to the bare import of the same round and mode, and the API's first 202 in (b) over (c)
of the same round; their medians are judged against the goals (1.3x; 0.5). It prints the
table and the goals to stderr, and one ``BENCH-RESULT`` line of JSON to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import Figure, emit_result, median, parse_result
from bench.throughput import standin_thread
from testkit import REPO_ROOT
from testkit.artifact import DEPENDENCIES_LAYER, LAYER_SITE, Artifact, make_artifact
from testkit.aws import fake_aws_env
from testkit.processes import DEFAULT_AGENT

if TYPE_CHECKING:
    from rollout_sdk.local.emulator import LocalResources

SERVER_KEY = "local-server-key"  # what events/*.json send
CALLBACK_KEY = "sample-callback-key"
TEMPLATE = REPO_ROOT / "template.yaml"
EVENTS = REPO_ROOT / "events"
#: The runtime's boto3 clients (attributes of ``AwsClients``) whose calls are counted.
CLIENTS = ("dynamodb", "s3", "lambda_", "kms", "secretsmanager", "sqs")


def init_event(rollout_id: str, server_url: str) -> dict[str, Any]:
    """events/init.json for ``rollout_id``, its ``server_url`` pointed at the stand-in."""
    event: dict[str, Any] = json.loads((EVENTS / "init.json").read_text(encoding="utf-8"))
    body = json.loads(event["body"])
    body["rollout_id"] = rollout_id
    body["server_url"] = server_url
    event["body"] = json.dumps(body)
    return event


def provision_stack(endpoint_url: str, prefix: str) -> LocalResources:
    """template.yaml's resources on moto's server at ``endpoint_url``, named after ``prefix``,
    for the default agent loop and :data:`SERVER_KEY`."""
    from rollout_sdk.local.emulator import provision

    return provision(
        endpoint_url,
        template_path=TEMPLATE,
        agent_loop=DEFAULT_AGENT,
        server_key=SERVER_KEY,
        prefix=prefix,
    )


# ---------------------------------------------------------------- requests per rollout


def count_requests(runs: int) -> dict[str, Any]:
    """``runs`` + 1 rollouts through handler.api and handler.worker, each request named."""
    from rollout_sdk.local.emulator import EmbeddedMoto, load_template
    from rollout_sdk.local.invoke import function_environment, import_handler, invoke
    from rollout_sdk.testing.standin import LOOPBACK_TRAINGATE

    rollouts: list[dict[str, Any]] = []
    failures: list[str] = []
    with EmbeddedMoto() as moto, standin_thread(CALLBACK_KEY) as (standin, _, url):
        resources = provision_stack(moto.endpoint_url, "bench-requests")
        env = function_environment(
            load_template(TEMPLATE), "ApiFunction", resources, LOOPBACK_TRAINGATE
        )
        os.chdir(REPO_ROOT)
        module = import_handler(env)
        try:
            phase = ["setup"]
            calls: list[tuple[str, str]] = []
            sends: list[tuple[str, str]] = []

            def recorder(into: list[tuple[str, str]]) -> Callable[..., None]:
                def record(event_name: str, **_: Any) -> None:
                    service, operation = event_name.split(".", 2)[1:]
                    into.append((phase[0], f"{service}.{operation}"))

                return record

            hooked = []
            for name in CLIENTS:
                if not hasattr(type(module.runtime.clients), name):
                    continue
                client = getattr(module.runtime.clients, name)
                client.meta.events.register("before-call.*.*", recorder(calls))
                client.meta.events.register("before-send.*.*", recorder(sends))
                hooked.append(name.rstrip("_"))
            for i in range(runs + 1):
                calls.clear()
                sends.clear()
                rollout_id = f"bench-requests-{i}"
                phase[0] = "api"
                init = invoke(
                    module, "ApiFunction", init_event(rollout_id, url), timeout_seconds=29
                )
                if init.result.get("statusCode") != 202 or len(init.dispatched) != 1:
                    failures.append(f"{rollout_id}: init answered {init.result.get('statusCode')}")
                    continue
                phase[0] = "worker"
                ran = invoke(module, "WorkerFunction", init.dispatched[0], timeout_seconds=900)
                if not ran.result.get("delivered"):
                    failures.append(f"{rollout_id}: worker result {ran.result}")
                rollouts.append(
                    {
                        "rollout_id": rollout_id,
                        "calls": [f"{p}: {op}" for p, op in calls],
                        "api_calls": len(calls),
                        "http_attempts": len(sends),
                        "by_phase": dict(Counter(p for p, _ in calls)),
                    }
                )
            delivered = sum(1 for r in rollouts if standin.completions.get(r["rollout_id"]))
            if delivered != len(rollouts):
                failures.append(f"{len(rollouts) - delivered} rollouts never called back")
        finally:
            module.runtime.close()
            sys.modules.pop("handler", None)
    steady = rollouts[1:]
    return {
        "hooked_clients": hooked,
        "first": rollouts[0] if rollouts else None,
        "runs": [r["api_calls"] for r in steady],
        "median": median([float(r["api_calls"]) for r in steady]),
        "http_attempts": [r["http_attempts"] for r in steady],
        "requests": steady[0]["calls"] if steady else [],
        "rollouts": steady,
        "failures": failures,
    }


# ---------------------------------------------------------------- cold start

#: The three ways a cold start is measured; each round runs every one (in turn, rotated).
COLD_MODES: dict[str, str] = {
    "warm": "(a) warm bytecode cache: the artifact as shipped, with its .pyc files, in a "
    "writable copy, after a warm-up round",
    "lambda": "(b) as Lambda runs it: the files as shipped, read-only, and "
    "PYTHONDONTWRITEBYTECODE=1 (root ignores the permissions: the variable is what keeps the "
    "cache unwritten)",
    "source": "(c) no bytecode (the artifact as it shipped before issue 13, botocore in it): "
    "the copy and the runtime's boto3 without their __pycache__ folders, "
    "PYTHONDONTWRITEBYTECODE=1, so every module but the standard library's is compiled from "
    "source at every start",
}
#: Each function's cold start, at most this many times the bare import (issue 13).
GOAL_VS_BARE = 1.3
#: The API's first 202 as Lambda runs it (b), at most this share of the no-bytecode one (c).
GOAL_LAMBDA_VS_SOURCE = 0.5
#: Every function's code is the same folder (with the same layer); this one's is measured.
ARTIFACT_FUNCTION = "ApiFunction"
BUILD_DIR = REPO_ROOT / ".aws-sam" / "build"
#: What the Makefile's function_artifact and dependency_layer read (AGENT_SOURCES at its
#: default): a build older than any of them is stale.
BUILD_INPUTS = (
    "handler.py",
    "rollout_sdk",
    "examples",
    "Makefile",
    "constraints.txt",
    "infra/requirements-lambda.txt",
    "requirements.txt",
)
CHILD = Path(__file__).resolve().parent / "coldchild.py"
#: The figures of one round, each in ms from just before the process was spawned.
COLD_FIGURES = (
    "bare_import_ms",
    "api_import_ms",
    "api_first_202_ms",
    "worker_import_ms",
    "worker_first_claim_ms",
    "worker_first_chat_ms",
    "worker_rollout_done_ms",
    # CPU time of the whole process (user + system): the API's ends soon after its 202, the
    # worker's after its rollout.
    "bare_cpu_ms",
    "api_cpu_ms",
    "worker_cpu_ms",
)


@dataclass(frozen=True)
class Interpreter:
    """The Python a cold start is measured with."""

    executable: str
    version: str  # 3.13.0
    cache_tag: str  # cpython-313

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


def resolve_python(name: str) -> Interpreter | str:
    """The real interpreter ``name`` runs (not a pyenv shim, whose bash start-up would be timed
    in every process), trying each installed pyenv version of that name; or why there is none."""
    probe = (
        "import sys; print(sys.executable, sys.version.split()[0], sys.implementation.cache_tag)"
    )
    attempts: list[dict[str, str]] = [dict(os.environ)]
    pyenv = shutil.which("pyenv")
    if pyenv:
        listed = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
            [pyenv, "versions", "--bare"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.split()
        wanted = name.removeprefix("python")
        attempts += [
            {**os.environ, "PYENV_VERSION": v}
            for v in listed
            if wanted and (v == wanted or v.startswith(wanted + "."))
        ]
    for env in attempts:
        try:
            done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
                [name, "-c", probe],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        fields = done.stdout.split()
        if done.returncode == 0 and len(fields) == 3:
            return Interpreter(*fields)
    return f"{name} not found (install it with `pyenv install 3.13.0`, or pass --python PATH)"


def lambda_artifact() -> Artifact:
    """The measured function's artifact in ``.aws-sam/build``: its code and the dependency
    layer (every function's code is the same, and every function carries that layer)."""
    return Artifact(
        ARTIFACT_FUNCTION, BUILD_DIR / ARTIFACT_FUNCTION, (BUILD_DIR / DEPENDENCIES_LAYER,)
    )


def artifact_staleness(artifact: Artifact, python: Interpreter) -> str | None:
    """Why ``artifact`` is not a build of this tree for ``python``, or None when it is.

    Stale when its code holds no handler.py or no bytecode of ``python``'s tag for it, when a
    layer holds no python/ folder or no bytecode of that tag for fastapi, or when a file of
    :data:`BUILD_INPUTS` (``__pycache__`` aside) was modified after the older of the two builds
    (the code's copy of handler.py, which ``cp`` gives the build's time; the layer's python/
    folder, which pip fills)."""
    handler = artifact.code / "handler.py"
    if not handler.is_file():
        return f"{artifact.code} holds no build"
    if not (artifact.code / "__pycache__" / f"handler.{python.cache_tag}.pyc").is_file():
        return f"no {python.cache_tag} bytecode in {artifact.code}"
    built = handler.stat().st_mtime
    for layer in artifact.layers:
        site = layer / LAYER_SITE
        if not (site / "fastapi" / "__pycache__" / f"__init__.{python.cache_tag}.pyc").is_file():
            return f"{layer} holds no build (or none for {python.cache_tag})"
        built = min(built, site.stat().st_mtime)
    for name in BUILD_INPUTS:
        top = REPO_ROOT / name
        for path in [top] if top.is_file() else top.rglob("*"):
            if "__pycache__" not in path.parts and path.stat().st_mtime > built:
                return f"{path.relative_to(REPO_ROOT)} changed after the build"
    return None


def ensure_artifact(python: Interpreter, *, build: bool = True) -> dict[str, Any]:
    """``.aws-sam/build/ApiFunction`` and its layer, reused when fresh, else built by the
    Makefile's recipes (``make build-DependenciesLayer`` and ``build-ApiFunction``, what ``sam
    build`` runs, without SAM; about a quarter of a minute). ``error`` says why there is none."""
    artifact = lambda_artifact()
    stale = artifact_staleness(artifact, python)
    info: dict[str, Any] = {
        "path": os.path.relpath(artifact.code, REPO_ROOT),
        "layers": [os.path.relpath(layer, REPO_ROOT) for layer in artifact.layers],
        "stale": stale,
    }
    if stale is None:
        return {**info, "built": False}
    if not build:
        return {**info, "error": f"not built ({stale}): run PYENV_VERSION=3.13.0 make package"}
    if shutil.which("make") is None:
        return {**info, "error": f"not built ({stale}) and make is not on PATH"}
    staging = BUILD_DIR.parent / "bench-staging"
    shutil.rmtree(staging, ignore_errors=True)
    path = f"{Path(python.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    started = time.monotonic()
    try:
        built = make_artifact(
            staging,
            ARTIFACT_FUNCTION,
            variables={"LAMBDA_PYTHON": python.minor},
            env={**os.environ, "PATH": path},
        )
    except subprocess.CalledProcessError as exc:
        return {**info, "error": f"{' '.join(exc.cmd[:3])} failed: {str(exc.stderr)[-800:]}"}
    for folder, into in zip(
        [built.code, *built.layers], [artifact.code, *artifact.layers], strict=True
    ):
        shutil.rmtree(into, ignore_errors=True)
        into.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(into)
    return {**info, "built": True, "build_seconds": round(time.monotonic() - started, 1)}


def mode_folders(
    artifact: Artifact, boto3_dir: Path, workdir: Path
) -> dict[str, tuple[Artifact, Path]]:
    """A copy of the artifact (its code and its layers) for each of :data:`COLD_MODES`, and the
    runtime's boto3 it runs with: in ``source`` a copy without bytecode too (every module
    compiled from source, as when the artifact shipped botocore without bytecode)."""
    folders: dict[str, tuple[Artifact, Path]] = {}
    no_bytecode = shutil.ignore_patterns("__pycache__")
    for mode in COLD_MODES:
        copies = []
        for folder in [artifact.code, *artifact.layers]:
            copy = workdir / mode / folder.name
            shutil.copytree(
                folder, copy, symlinks=True, ignore=no_bytecode if mode == "source" else None
            )
            if mode == "lambda":  # Lambda's /var/task and /opt: read-only (root writes anyway)
                for path in [copy, *copy.rglob("*")]:
                    if not path.is_symlink():
                        path.chmod(path.stat().st_mode & ~0o222)
            copies.append(copy)
        boto3 = boto3_dir
        if mode == "source":
            boto3 = workdir / "source-boto3"
            shutil.copytree(boto3_dir, boto3, symlinks=True, ignore=no_bytecode)
        folders[mode] = (Artifact(artifact.name, copies[0], tuple(copies[1:])), boto3)
    return folders


def mode_env(
    mode: str, function_env: dict[str, str], artifact: Artifact, boto3_dir: Path
) -> dict[str, str]:
    """A Lambda-like environment: the function's variables (pointed at moto), fake AWS, the
    artifact copy (its code, then its layers' python/) then the runtime's boto3 as the whole
    path, no user site."""
    env = {
        **artifact.environment(function_env),
        "PYTHONPATH": artifact.python_path(boto3_dir),
        "PYTHONNOUSERSITE": "1",
    }
    if mode != "warm":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TZ")}
    return fake_aws_env(env, base=base, clean=True)


def cold_child(
    python: str, mode: str, env: dict[str, str], cwd: Path, event: Any | None, workdir: Path
) -> dict[str, Any]:
    """One fresh ``bench/coldchild.py`` process (``-S``: no site, so nothing but the path the
    environment gives; ``-P``: not bench/ on it); its stamps made relative to the spawn."""
    argv = [python, "-S", "-P", str(CHILD), mode]
    if event is not None:
        path = workdir / f"{mode}-event.json"
        path.write_text(json.dumps(event), encoding="utf-8")
        argv.append(str(path))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawned = time.monotonic()
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:  # run() has killed it
        return {"mode": mode, "error": "timed out after 120 s"}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out: dict[str, Any] = parse_result(done.stdout)
    except ValueError:
        return {"mode": mode, "error": f"exit {done.returncode}: {done.stderr[-800:]}"}
    out["spawned"] = spawned
    # The children run one at a time (moto's process is never waited for while they run), so
    # the difference is this one's CPU: a figure other work on the machine disturbs less.
    out["cpu_ms"] = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    for key in ("imported", "first_202", "claimed", "done"):
        if isinstance(out.get(key), float):
            out[f"{key}_ms"] = (out.pop(key) - spawned) * 1000
    return out


def entry_variables(
    template: dict[str, Any], resources: Any, overrides: dict[str, str] | None = None
) -> dict[str, dict[str, str]]:
    """The API's and the worker's variables as the template sets them against ``resources``
    (deployed with ``overrides``), with ``_HANDLER`` as Lambda sets it (handler.py imports that
    entry point's module at once)."""
    from rollout_sdk.local.invoke import function_environment
    from rollout_sdk.testing.standin import LOOPBACK_TRAINGATE

    parameters = {**LOOPBACK_TRAINGATE, **(overrides or {})}
    return {
        kind: {
            **function_environment(template, logical, resources, parameters),
            "_HANDLER": f"handler.{kind}",
        }
        for kind, logical in (("api", "ApiFunction"), ("worker", "WorkerFunction"))
    }


def cold_round(
    python: str,
    envs: dict[str, dict[str, str]],
    code: Path,
    workdir: Path,
    standin: Any,
    url: str,
    rollout_id: str,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One round's three children: the bare import, the API's init of ``rollout_id`` to its
    202, and the worker on the event it dispatched (``{"error": "no worker event"}`` when it
    dispatched none), its first chat call as the stand-in stamped it (``first_chat_ms``)."""
    bare = cold_child(python, "bare", envs["api"], code, None, workdir)
    api = cold_child(python, "api", envs["api"], code, init_event(rollout_id, url), workdir)
    dispatched = api.get("dispatched") or []
    worker: dict[str, Any] = {"mode": "worker", "error": "no worker event"}
    if api.get("status") == 202 and len(dispatched) == 1:
        worker = cold_child(python, "worker", envs["worker"], code, dispatched[0], workdir)
    chats = standin.calls_for("chat", rollout_id)
    if chats and "spawned" in worker:
        worker["first_chat_ms"] = (min(call.arrived for call in chats) - worker["spawned"]) * 1000
    return bare, api, worker


def cold_start(
    runs: int,
    python_name: str = "python3.13",
    *,
    build: bool = True,
    overrides: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``runs`` rounds (after one warm-up round) of the bare import, the API's first 202 and the
    worker's first chat call, each in the three :data:`COLD_MODES`, on ``python_name`` with the
    Lambda artifact, deployed with the template parameters ``overrides``. ``not_measured`` says
    why nothing was."""
    from bench.package import runtime_boto3
    from rollout_sdk.local.emulator import EmbeddedMoto, load_template

    python = resolve_python(python_name)
    if isinstance(python, str):
        return {"not_measured": python, "failures": []}
    artifact = ensure_artifact(python, build=build)
    report: dict[str, Any] = {
        "python": python.executable,
        "python_version": python.version,
        "artifact": artifact,
        "boto3": "the runtime's (not in the artifact): boto3 of constraints.txt installed with "
        "pip --target by that Python, with its bytecode, as the runtime image has it",
        "first_chat": "stamped by the TrainGate stand-in (in the bench process) when the "
        "worker's first chat request arrives",
        "modes": dict(COLD_MODES),
        "parameters": dict(overrides or {}),
    }
    if "error" in artifact:
        return {**report, "not_measured": artifact["error"], "failures": []}
    boto3_dir = runtime_boto3(python.executable, BUILD_DIR.parent / "runtime-boto3")
    template = load_template(TEMPLATE)
    rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in COLD_MODES}
    failures: list[str] = []
    network: list[str] = []
    with (
        EmbeddedMoto() as moto,
        standin_thread(CALLBACK_KEY) as (standin, _, url),
        tempfile.TemporaryDirectory(prefix="rollout-sdk-bench-") as tmp,
    ):
        workdir = Path(tmp)
        folders = mode_folders(lambda_artifact(), boto3_dir, workdir)
        resources = provision_stack(moto.endpoint_url, "bench-cold")
        variables = entry_variables(template, resources, overrides)
        modes = list(COLD_MODES)
        for i in range(runs + 1):
            for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
                copy, boto3 = folders[mode]
                envs = {kind: mode_env(mode, v, copy, boto3) for kind, v in variables.items()}
                rollout_id = f"bench-cold-{mode}-{i}"
                bare, api, worker = cold_round(
                    python.executable, envs, copy.code, workdir, standin, url, rollout_id
                )
                if api.get("status") != 202 or len(api.get("dispatched") or []) != 1:
                    failures.append(f"{mode} round {i}: api {api.get('status')}")
                elif (worker.get("result") or {}).get("state") != "DELIVERED":
                    failures.append(f"{mode} round {i}: worker {worker.get('result')}")
                for child in (bare, api, worker):
                    network += child.get("network_attempts") or []
                    if "error" in child and child["error"] != "no worker event":
                        failures.append(f"{mode} round {i}: {child['mode']}: {child['error']}")
                    data = child.get("botocore_data") or {}  # the API's and the worker's
                    if data.get("folder") and not data.get("used"):
                        failures.append(
                            f"{mode} round {i}: {child['mode']}: the kit's clients did not read "
                            f"its botocore data (built from botocore {data.get('built_from')}, "
                            f"the runtime's is {data.get('runtime_botocore')}): the figure "
                            "would be botocore's whole data's"
                        )
                if i == 0:  # round 0 warms the OS's file cache and (warm) the bytecode cache
                    continue
                rounds[mode].append(
                    {
                        "bare_import_ms": bare.get("imported_ms"),
                        "api_import_ms": api.get("imported_ms"),
                        "api_first_202_ms": api.get("first_202_ms"),
                        "worker_import_ms": worker.get("imported_ms"),
                        "worker_first_claim_ms": worker.get("claimed_ms"),
                        "worker_first_chat_ms": worker.get("first_chat_ms"),
                        "worker_rollout_done_ms": worker.get("done_ms"),
                        "bare_cpu_ms": bare.get("cpu_ms"),
                        "api_cpu_ms": api.get("cpu_ms"),
                        "worker_cpu_ms": worker.get("cpu_ms"),
                        "compiled_from_source": {
                            c["mode"]: c.get("compiled_from_source") for c in (bare, api, worker)
                        },
                    }
                )
    return {**report, "rounds": rounds, "network_at_import": network, "failures": failures}


def _ratios(rounds: list[dict[str, Any]], top: str, bottom: str) -> list[float]:
    """``top / bottom`` of each round that has both."""
    return [r[top] / r[bottom] for r in rounds if r.get(top) and r.get(bottom)]


def cold_start_figures(result: dict[str, Any]) -> dict[str, Any]:
    """The medians of :func:`cold_start`'s rounds per mode, each function's ratio to the bare
    import of the same round, and the API's first 202 as Lambda runs it over the no-bytecode
    one (rounds paired)."""
    figures: dict[str, Any] = {
        k: result[k]
        for k in ("python", "python_version", "artifact", "boto3", "first_chat", "modes")
        if k in result
    }
    if "not_measured" in result:
        return {**figures, "not_measured": result["not_measured"]}
    rounds: dict[str, list[dict[str, Any]]] = result.get("rounds", {})
    by_mode: dict[str, Any] = {}
    for mode, kept in rounds.items():
        by_mode[mode] = {
            **{
                key: Figure("ms", [float(r[key]) for r in kept if r.get(key) is not None]).to_json()
                for key in COLD_FIGURES
            },
            "api_vs_bare": Figure(
                "ratio", _ratios(kept, "api_first_202_ms", "bare_import_ms")
            ).to_json(),
            "worker_vs_bare": Figure(
                "ratio", _ratios(kept, "worker_first_chat_ms", "bare_import_ms")
            ).to_json(),
            "api_cpu_vs_bare_cpu": Figure(
                "ratio", _ratios(kept, "api_cpu_ms", "bare_cpu_ms")
            ).to_json(),
            "compiled_from_source": kept[-1]["compiled_from_source"] if kept else None,
        }
    paired = [
        {"lambda": b, "source": c}
        for b, c in zip(rounds.get("lambda", []), rounds.get("source", []), strict=False)
    ]
    lambda_vs_source = Figure(
        "ratio",
        [
            p["lambda"]["api_first_202_ms"] / p["source"]["api_first_202_ms"]
            for p in paired
            if p["lambda"].get("api_first_202_ms") and p["source"].get("api_first_202_ms")
        ],
    )
    return {
        **figures,
        "by_mode": by_mode,
        "api_lambda_vs_source": lambda_vs_source.to_json(),
        "network_at_import": result.get("network_at_import", ["(not measured)"]),
        "rounds": rounds,
    }


def cold_start_goals(figures: dict[str, Any]) -> list[tuple[str, str, float | None, bool | None]]:
    """(goal, target, measured median, passed) of issue 13's cold-start goals, judged as Lambda
    runs it (mode b); the last two None when not measured."""
    lambda_mode = (figures.get("by_mode") or {}).get("lambda", {})
    measured = (
        (
            "cold start (b): API first 202 / bare import",
            GOAL_VS_BARE,
            (lambda_mode.get("api_vs_bare") or {}).get("median"),
        ),
        (
            "cold start (b): worker first chat / bare import",
            GOAL_VS_BARE,
            (lambda_mode.get("worker_vs_bare") or {}).get("median"),
        ),
        (
            "cold start: API first 202, (b) / (c) no bytecode",
            GOAL_LAMBDA_VS_SOURCE,
            (figures.get("api_lambda_vs_source") or {}).get("median"),
        ),
    )
    return [
        (name, f"<= {limit:g}", value, None if value is None else value <= limit)
        for name, limit, value in measured
    ]


def cold_start_lines(figures: dict[str, Any]) -> list[str]:
    """The cold-start table of a summary."""
    if "not_measured" in figures or "by_mode" not in figures:
        return [f"cold start: not measured: {figures.get('not_measured', 'no per-mode figures')}"]
    lines = [
        f"cold start on {figures.get('python_version')} with the Lambda artifact "
        f"({(figures.get('artifact') or {}).get('path')}), ms from spawn, median of "
        f"{len(next(iter(figures['rounds'].values()), []))} rounds; first chat stamped by the "
        "stand-in",
        f"  {'mode':<8}{'bare':>7}{'API 202':>9}{'x bare':>8}{'claim':>8}{'1st chat':>9}"
        f"{'x bare':>8}{'done':>7}  CPU ms bare/api/worker (api x bare)  compiled from source",
    ]
    for mode, f in figures["by_mode"].items():
        compiled = f.get("compiled_from_source") or {}
        lines.append(
            f"  {mode:<8}{_fmt(f['bare_import_ms']['median'], 0):>7}"
            f"{_fmt(f['api_first_202_ms']['median'], 0):>9}"
            f"{_fmt(f['api_vs_bare']['median'], 2):>8}"
            f"{_fmt(f['worker_first_claim_ms']['median'], 0):>8}"
            f"{_fmt(f['worker_first_chat_ms']['median'], 0):>9}"
            f"{_fmt(f['worker_vs_bare']['median'], 2):>8}"
            f"{_fmt(f['worker_rollout_done_ms']['median'], 0):>7}  "
            + "/".join(_fmt(f[f"{k}_cpu_ms"]["median"], 0) for k in ("bare", "api", "worker"))
            + f" ({_fmt(f['api_cpu_vs_bare_cpu']['median'], 2)})  "
            + "/".join(str(compiled.get(k, "-")) for k in ("bare", "api", "worker"))
        )
    lines.append(
        f"  API first 202, (b) lambda / (c) source: "
        f"{_fmt(figures['api_lambda_vs_source']['median'], 2)}; network at import: "
        f"{len(figures['network_at_import'])} attempts"
    )
    return lines


def _fmt(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def cold_start_chart(axes: Any, figures: dict[str, Any]) -> None:
    """The cold-start ratios to the bare import per mode, and (b)/(c), on ``axes``."""
    by_mode = figures.get("by_mode") or {}
    modes = list(by_mode)
    width = 0.38
    for j, (key, label) in enumerate(
        (("api_vs_bare", "API first 202"), ("worker_vs_bare", "worker first chat"))
    ):
        values = [by_mode[m][key]["median"] or 0.0 for m in modes]
        xs = [i + (j - 0.5) * width for i in range(len(modes))]
        axes.bar(xs, values, width, label=f"{label} / bare import")
        for x, v in zip(xs, values, strict=True):
            axes.annotate(f"{v:.2f}", (x, v), ha="center", va="bottom", fontsize=8)
    axes.axhline(
        GOAL_VS_BARE, linestyle="--", linewidth=1, color="#d62728", label=f"goal {GOAL_VS_BARE}x"
    )
    ratio = (figures.get("api_lambda_vs_source") or {}).get("median")
    axes.set_xticks(range(len(modes)), [f"({'abc'[i]}) {m}" for i, m in enumerate(modes)])
    axes.set_ylabel("x bare import (median)")
    axes.set_title(
        "Cold start vs bare import, "
        + (
            f"API (b)/(c) = {ratio:.2f} (goal <= {GOAL_LAMBDA_VS_SOURCE})"
            if ratio
            else "not measured"
        )
        if by_mode
        else "Cold start: not measured"
    )
    axes.legend(fontsize=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.aws",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("what", choices=("requests", "coldstart"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--python",
        default="python3.13",
        help="coldstart: the Lambda runtime's Python (default python3.13; a pyenv version of "
        "that name is found by itself)",
    )
    parser.add_argument(
        "--no-build",
        action="store_true",
        help="coldstart: report a missing or stale artifact instead of building it",
    )
    parser.add_argument(
        "--parameter-overrides",
        metavar="NAME=VALUE",
        nargs="+",
        default=[],
        help="coldstart: template parameters of the deploy measured, e.g. "
        "Workflow=examples.osmosis03.workflow:AnswerWorkflow (its API loads the 0.3.8 modules)",
    )
    args = parser.parse_args(argv)
    if args.what == "requests":
        emit_result(count_requests(args.runs))
        return 0
    from rollout_sdk.local.invoke import parse_overrides

    result = cold_start(
        args.runs,
        args.python,
        build=not args.no_build,
        overrides=parse_overrides(args.parameter_overrides),
    )
    figures = cold_start_figures(result)
    for line in cold_start_lines(figures):
        print(line, file=sys.stderr)
    for goal, target, measured, passed in cold_start_goals(figures):
        verdict = {True: "PASS", False: "MISS", None: "n/a "}[passed]
        print(
            f"  {verdict}  {goal:<48} {target:>7}   measured {_fmt(measured, 3)}", file=sys.stderr
        )
    for failure in result.get("failures", []):
        print(f"  FAILURE {failure}", file=sys.stderr)
    emit_result(result)
    return 1 if result.get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
