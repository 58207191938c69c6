"""What an import costs in a fresh interpreter: how long it takes and which modules it loads.

The kit's own tests and ``make bench`` hold the agent author's import to it (:data:`AUTHOR_IMPORT`
loads none of :data:`SERVER_MODULES`), and ``make package`` checks the Lambda handlers with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: What an agent author writes (the v1 SDK's names).
AUTHOR_IMPORT = (
    "from rollout_sdk import RolloutAgentLoop, RolloutContext, RolloutResult, RolloutRequest, "
    "OpenAIFunctionToolSchema"
)
#: The web framework, the server, the AWS SDK, SQLite and the HTTP client: none of them is the
#: agent author's business, so :data:`AUTHOR_IMPORT` must load none.
SERVER_MODULES = (
    "fastapi",
    "starlette",
    "uvicorn",
    "boto3",
    "botocore",
    "mangum",
    "aws_lambda_powertools",
    "sqlite3",
    "httpx",
)

# Run in the child: time the statement alone (the interpreter's start-up is not counted), then
# report every module loaded. json is imported after the clock stops, so it is not counted.
_PROBE = """\
import sys, time
began = time.perf_counter()
exec(compile(sys.argv[1], "<import probe>", "exec"), {})
seconds = time.perf_counter() - began
import json
print(json.dumps({"seconds": seconds, "modules": sorted(sys.modules)}))
"""


@dataclass(frozen=True)
class ImportProbe:
    """One fresh interpreter's answer: the seconds the statement took and the modules loaded
    by then (start-up's included), or the last line of its error output; ``stderr`` is all of
    that output (``-X importtime`` writes there)."""

    seconds: float
    modules: frozenset[str]
    error: str | None = None
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    def loaded(self, packages: Iterable[str]) -> list[str]:
        """The loaded modules that are one of ``packages`` or inside one, sorted."""
        wanted = tuple(packages)
        return sorted(
            name
            for name in self.modules
            if any(name == p or name.startswith(p + ".") for p in wanted)
        )


def probe_import(
    statement: str,
    *,
    python: str = sys.executable,
    flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 60.0,
) -> ImportProbe:
    """Run ``statement`` in a fresh ``python`` (with ``flags``, e.g. ``-S``) and report it.

    A statement that fails, or a child that does not answer within ``timeout`` seconds, gives
    an ``ImportProbe`` whose ``error`` says why; nothing is raised.
    """
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
            [python, *flags, "-c", _PROBE, statement],
            env=None if env is None else dict(env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ImportProbe(0.0, frozenset(), f"no answer within {timeout:g} s")
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return ImportProbe(0.0, frozenset(), lines[-1] if lines else f"exit {done.returncode}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return ImportProbe(float(report["seconds"]), frozenset(report["modules"]), stderr=done.stderr)
