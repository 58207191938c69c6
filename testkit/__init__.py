"""The repository's test kit: what the tests and the benchmarks share.

Rigs (servers and the TrainGate stand-in as subprocesses or threads), the fake-AWS environment,
the calculator's request bodies, bounded waits, the reliability scenarios and their report,
import probes (what an import costs in a fresh interpreter), and the Lambda artifact as `sam
build` makes it (a function's code and its layers).
``tests/`` and ``bench/`` both import it; neither imports the other. It is not in the wheel
(setuptools finds only ``rollout_sdk*``) nor in the Lambda artifact, and ``rollout_sdk`` never
imports it; the public test doubles of the kit stay in :mod:`rollout_sdk.testing`.
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the working directory of every subprocess the kit starts).
REPO_ROOT = Path(__file__).resolve().parent.parent
